"""Runnable demonstrations of torch_monarch."""
