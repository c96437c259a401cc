"""API types of governance.fgentic.dev/v1alpha1: the one source of the CRDs and schemas."""

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.registry import KINDS, CustomResource

__all__ = ["GROUP", "KINDS", "VERSION", "CustomResource"]
