"""docs/kubernetes.md's YAML: it parses, its servers and clients meet in one directory mounted
at the same path, and `shoal server` takes the DaemonSet's arguments and gives the region and
its sockets the modes the application pods' group needs."""

import os
import re
import stat

import yaml

from harness import ROOT, SHOAL, Server, free_port

RECIPE = ROOT / "docs" / "kubernetes.md"


def documents():
    blocks = re.findall(r"```yaml\n(.*?)```", RECIPE.read_text(), re.S)
    assert blocks, "docs/kubernetes.md has no yaml block"
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def pod_spec(doc):
    return doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]


def option(args, flag):
    return args[args.index(flag) + 1]


def servers(doc):
    spec = pod_spec(doc)
    return [c for c in spec["containers"] if c.get("command", [])[:2] == ["shoal", "server"]]


def test_every_document_is_a_kubernetes_object():
    kinds = [(doc["kind"], doc["apiVersion"]) for doc in documents()]
    assert ("DaemonSet", "apps/v1") in kinds and ("Deployment", "apps/v1") in kinds and ("Pod", "v1") in kinds
    for doc in documents():
        assert doc["metadata"]["name"] and pod_spec(doc)["containers"]


def test_servers_and_clients_share_one_directory_at_one_path():
    """Each server's region and socket lie in a volume; every container mounting that volume
    (the server's, the application's) mounts it at the same path, and the application's
    SHOAL_SERVER is the server's socket."""
    docs = documents()
    server_docs = [doc for doc in docs if servers(doc)]
    assert len(server_docs) == 2  # the DaemonSet and the sidecar pod
    by_host_path = {}
    for doc in docs:
        spec = pod_spec(doc)
        sources = {v["name"]: v.get("hostPath", {}).get("path") or f"{doc['metadata']['name']}/{v['name']}"
                   for v in spec["volumes"]}
        for container in spec.get("initContainers", []) + spec["containers"]:
            for mount in container.get("volumeMounts", []):
                by_host_path.setdefault(sources[mount["name"]], set()).add(mount["mountPath"])
    assert all(len(paths) == 1 for paths in by_host_path.values()), by_host_path
    mounted = {path for paths in by_host_path.values() for path in paths}
    sockets = set()
    for doc in server_docs:
        for container in servers(doc):
            args = container["args"]
            region, socket = option(args, "-e"), option(args, "-s")
            assert os.path.dirname(region) == os.path.dirname(socket) in mounted
            sockets.add(socket)
    for doc in docs:
        for container in pod_spec(doc)["containers"]:
            for env in container.get("env", []):
                if env["name"] == "SHOAL_SERVER":
                    assert env["value"] in sockets


def test_the_daemonsets_server_starts_with_the_modes_its_readers_need(tmp_path):
    daemonset = next(doc for doc in documents() if doc["kind"] == "DaemonSet")
    (container,) = servers(daemonset)
    directory = os.path.dirname(option(container["args"], "-e"))
    metrics = free_port()
    args = [a.replace(directory, str(tmp_path)) for a in container["args"]]
    args[args.index("-m") + 1] = "64"  # a small region for the test; the flags are the recipe's
    args[args.index("--metrics-listen") + 1] = f"127.0.0.1:{metrics}"
    # -s serves the unix socket only; /metrics answering means the listeners are bound.
    with Server([str(SHOAL), "server", *args], metrics, "shoal"):
        modes = {name: stat.S_IMODE(os.stat(tmp_path / name).st_mode)
                 for name in ("region", "region.hints", "shoal.sock")}
    assert modes == {"region": 0o640, "region.hints": 0o660, "shoal.sock": 0o770}
