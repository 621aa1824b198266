"""What a request handler needs: the process's runtime (settings, session factory, index backend, job queue) and
a session.

One runtime per application, opened in the lifespan (``ferret.runtime.context.open_runtime``); one session per
request, closed (and rolled back unless a handler committed) when the request ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from ferret.runtime.context import Runtime


async def get_state(request: Request) -> Runtime:
    # async: a plain attribute read, so it runs on the event loop instead of costing a hop to the thread pool.
    state: Runtime = request.app.state.ferret
    return state


def get_session(state: Annotated[Runtime, Depends(get_state)]) -> Iterator[Session]:
    session = state.sessions()
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


StateDep = Annotated[Runtime, Depends(get_state)]
SessionDep = Annotated[Session, Depends(get_session)]
