"""What a request handler needs: the application's state (settings, session factory, index backend) and a session.

One engine, session factory and index backend per application, opened in the lifespan; one session per request,
closed (and rolled back unless a handler committed) when the request ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from ferret.core.index.backend import IndexBackend
from ferret.core.settings import FerretSettings


@dataclass(frozen=True)
class ApiState:
    settings: FerretSettings
    sessions: sessionmaker[Session]
    backend: IndexBackend


async def get_state(request: Request) -> ApiState:
    # async: a plain attribute read, so it runs on the event loop instead of costing a hop to the thread pool.
    state: ApiState = request.app.state.ferret
    return state


def get_session(state: Annotated[ApiState, Depends(get_state)]) -> Iterator[Session]:
    session = state.sessions()
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


StateDep = Annotated[ApiState, Depends(get_state)]
SessionDep = Annotated[Session, Depends(get_session)]
