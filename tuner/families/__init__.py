"""The registered kernel families: one module each, defining FAMILY (see tuner/family.py)."""
