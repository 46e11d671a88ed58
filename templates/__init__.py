"""Jinja2 templates that render the generated kernels (installed as tuner.templates)."""
