"""The docker-compose worker services equivalent to ``ctxsim worker``'s workers
(:func:`ctxsim.flows.ops.worker_specs`); tests/flows/test_ops_compose.py compares them with
docker-compose.yml."""

from __future__ import annotations

from typing import Any

from ctxsim.flows.ops import WorkerSpec


def compose_worker_services(specs: list[WorkerSpec]) -> dict[str, dict[str, Any]]:
    """The docker-compose services equivalent to ``specs`` (what docker-compose.yml must hold).

    In a container the GPU is pinned by a device reservation rather than CUDA_VISIBLE_DEVICES
    (the container sees only its reserved device), so a spec's CUDA_VISIBLE_DEVICES becomes the
    service's ``device_ids``; CPU workers get no reservation.
    """
    services: dict[str, dict[str, Any]] = {}
    for spec in specs:
        svc: dict[str, Any] = {"command": list(spec.argv)}
        gpu = spec.env.get("CUDA_VISIBLE_DEVICES")
        if gpu:
            svc["deploy"] = {
                "resources": {
                    "reservations": {
                        "devices": [
                            {"driver": "nvidia", "device_ids": [gpu], "capabilities": ["gpu"]}
                        ]
                    }
                }
            }
        services[f"worker-{spec.name.rsplit('-', 1)[-1]}"] = svc
    return services
