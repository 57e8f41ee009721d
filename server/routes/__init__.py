"""One module per route group, each exposing ``router`` (a FastAPI ``APIRouter``); ``server.app`` includes
every module listed in ``ROUTE_MODULES`` there."""
