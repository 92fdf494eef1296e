"""The contextual models and what they compute: the coherence discriminator and the generative
scorers of Eq. 3 (with their training, int8 and batched score engine), sampled contexts, the
encoder as a contextual model, and Origin itself (Eq. 4) over their scores."""
