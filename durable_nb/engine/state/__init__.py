"""A run's state in the store: values encoded once and loaded by manifest, lists that grow by
appending, the state the engine holds while it works, and the checkpoint drafts that continue
another checkpoint."""
