"""Human gates: pausing a node or cell durably until someone decides, and deciding: one call
claims the gate and writes the decision, by a person or by a deadline."""
