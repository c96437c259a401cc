"""Pure renderers: spec in, manifests out; shared by the operator and `render`."""
