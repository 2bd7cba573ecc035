"""template.yaml and its deployment settings, checked without AWS: the AWS linters and the
wiring the functions rely on."""
