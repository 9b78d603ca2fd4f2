"""Custom checkov checks (CKV_SPOT_*), one class per file: `checkov --external-checks-dir
policies/checkov`. checkov imports each file by its bare name, hence the ckv_spot_ prefix."""
