"""Provision dashboards into Grafana with grafana-client."""
from __future__ import annotations

import copy
from typing import Iterator, Optional

from spark_governor.dashboards import load_all


class PushError(RuntimeError):
    pass


def _bind_datasource(dashboard: dict, datasource_uid: Optional[str]) -> dict:
    d = copy.deepcopy(dashboard)
    if datasource_uid:
        for var in d.get("templating", {}).get("list", []):
            if var.get("type") == "datasource":
                var["current"] = {"text": datasource_uid, "value": datasource_uid}
    return d


def push_all(grafana_url: str, *, token: Optional[str] = None, user: Optional[str] = None,
             password: Optional[str] = None, datasource_uid: Optional[str] = None,
             folder_uid: Optional[str] = None, timeout_s: float = 10.0) -> Iterator[tuple[str, str]]:
    """Create or overwrite each dashboard; yields ``(uid, status)``."""
    from grafana_client import GrafanaApi
    from grafana_client.client import GrafanaException

    credential = token or ((user, password) if user else None)
    api = GrafanaApi.from_url(grafana_url, credential=credential, timeout=timeout_s)
    for dashboard in load_all():
        payload = {"dashboard": _bind_datasource(dashboard, datasource_uid), "overwrite": True,
                   "message": "provisioned by spark-governor"}
        if folder_uid:
            payload["folderUid"] = folder_uid
        try:
            resp = api.dashboard.update_dashboard(payload)
        except GrafanaException as exc:
            raise PushError(f"{dashboard['uid']}: Grafana answered {exc.status_code}: {exc.message}") from None
        except Exception as exc:  # connection problems
            raise PushError(f"{dashboard['uid']}: cannot reach Grafana at {grafana_url}: {exc}") from None
        yield dashboard["uid"], (resp or {}).get("status", "ok")
