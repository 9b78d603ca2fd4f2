import pulumi_aws as aws

aws.s3.Bucket("checkpoints", tags={"team": "vision", "env": "test", "capacity-type": "spot"})
