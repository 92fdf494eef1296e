"""The labelled dataset as a product: export with a dataset card, per-pair explanations, label
diagnostics and the test-set contamination check. No Prefect here: flows/cli_product.py is the
command-line glue, the label stage calls the diagnostics and the contamination check."""
