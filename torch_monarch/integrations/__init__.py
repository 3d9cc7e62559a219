"""Hooks that make other trainers use torch_monarch (see ``torchtitan``)."""
