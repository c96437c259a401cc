"""The local projector's step from a validated room context to a Matrix projection.

The bridge supplies the room input; the projector stamps only what it owns: the route-derived
Agent, iat/exp, the empty group list and the top-level caller fields. Keeping this next to the
shapes means the projector cannot add, drop or reinterpret a field by accident.
"""

from __future__ import annotations

from pydantic import ValidationError

from fgentic_governance.contract import limits, semantics
from fgentic_governance.contract.codec import shape_error
from fgentic_governance.contract.errors import ContractError
from fgentic_governance.contract.shapes import (
    AgentRef,
    BridgedMatrixProjection,
    BridgedPrincipal,
    MatrixProjection,
    RoomContext,
)


def stamp_matrix(
    context: RoomContext, *, agent: AgentRef, iat: int
) -> MatrixProjection | BridgedMatrixProjection:
    """The canonical Matrix projection for a room context, valid for 600 s from `iat`."""
    semantics.check_room_context(context)
    exp = iat + limits.MATRIX_LIFETIME_SECONDS
    projection: MatrixProjection | BridgedMatrixProjection
    failure: ContractError | None = None
    try:
        projection = _build(context, agent, iat, exp)
    except ValidationError as exc:  # e.g. an iat outside the safe integer range
        failure = shape_error(exc)
    if failure is not None:
        raise failure from None
    semantics.check_static(projection)
    return projection


def _build(
    context: RoomContext, agent: AgentRef, iat: int, exp: int
) -> MatrixProjection | BridgedMatrixProjection:
    caller = context.caller
    if isinstance(caller, BridgedPrincipal):
        return BridgedMatrixProjection(
            agent=agent, allowed_classifications=context.allowed_classifications,
            audience=context.audience, delegation_id=context.delegation_id, exp=exp,
            groups=(), iat=iat, kind="bridged_matrix", network=caller.network,
            principal=caller.principal, room=context.room, v=1)
    return MatrixProjection(
        agent=agent, allowed_classifications=context.allowed_classifications,
        audience=context.audience, delegation_id=context.delegation_id, exp=exp,
        groups=(), iat=iat, kind="matrix", principal=caller.principal,
        room=context.room, v=1)
