import pulumi_aws as aws

aws.eks.NodeGroup(
    "spot",
    cluster_name="training",
    node_role_arn="arn:aws:iam::123456789012:role/node",
    subnet_ids=["subnet-0a1b2c3d4e5f60718"],
    capacity_type="SPOT",
    instance_types=["p4d.24xlarge"],
    scaling_config={"min_size": 0, "max_size": 4, "desired_size": 0},
    tags={"team": "vision", "env": "test", "capacity-type": "spot"},
)
