"""Training sentence encoders: how one is built from a backbone, the objectives the `train` stage
offers (one class per file), their losses, and the vocabulary of tiny from-scratch models."""
