"""Offboarding: erase every memory scope of one exact principal before deactivation."""
