"""The EP tests use the session fixtures ``webgpu`` and ``webgpu_table`` of tests/conftest.py."""
