"""An example third-party Esper plugin."""
