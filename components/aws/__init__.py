"""AWS implementation of the platform: EKS, S3, IAM, SQS/EventBridge, CloudWatch."""
