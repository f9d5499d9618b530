"""A FastAPI app that enqueues jobs in its request handlers.

One `Queue` is opened in the app's lifespan and shared by every request; the dashboard and the
health check are mounted beside the API. Serve it with any ASGI server, e.g.

    DASHBOARD_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))') \
        hypercorn docs.examples.fastapi_app:app

and run the jobs in a worker process: `blamequeue worker mymodule:charge --queue orders`.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException

import blamequeue

queue = blamequeue.Queue(
    backends={"main": {"protocol": "local", "path": os.environ.get("ORDERS_DB", "orders.db")}}
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with queue:  # opened once; closed (in-flight hand-offs finished) at shutdown
        yield


app = FastAPI(lifespan=lifespan)
app.mount("/health", blamequeue.health_app(queue))
app.mount("/queues", blamequeue.dashboard_app(queue, token=os.environ["DASHBOARD_TOKEN"]))


@app.post("/orders/{order}", status_code=202)
async def place_order(order: int) -> dict[str, str]:
    # A chosen id makes a retried request (the client timed out, the user clicked twice)
    # enqueue nothing new.
    job_id = await queue.enqueue("orders", {"order": order}, job_id=f"order-{order}")
    return {"job_id": job_id}


@app.get("/orders/{order}")
async def order_status(order: int) -> dict[str, str]:
    info = await queue.job_info(f"order-{order}")
    if info is None:
        raise HTTPException(404, f"no order {order}")
    return {"job_id": info.job_id, "state": info.state}
