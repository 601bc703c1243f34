"""The engine: run lifecycle and execution over a store. No IPython here."""
