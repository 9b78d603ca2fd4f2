import json

import pulumi_aws as aws

TAGS = {"team": "vision", "env": "test", "capacity-type": "spot"}
trust = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}
admin = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}
role = aws.iam.Role("training", assume_role_policy=json.dumps(trust), tags=TAGS)
aws.iam.RolePolicy("training-admin", role=role.name, policy=json.dumps(admin))
