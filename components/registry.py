"""What the training image's repository keeps on either cloud (`aws/registry.py`,
`gcp/registry.py`)."""

# Untagged images are build leftovers; a pushed release always carries its tag.
UNTAGGED_EXPIRE_DAYS = 14
