"""The dashboard's panels and bars, one module each."""
