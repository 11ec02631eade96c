"""Tests for gridctl.split and the ``gridctl split`` command."""
