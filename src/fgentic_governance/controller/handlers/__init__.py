"""Kopf registrations. Thin: parse the object, call the core, write status and events."""
