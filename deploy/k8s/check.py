"""Checks rendered fleetrl manifests: every object against the Kubernetes API schema (strict:
unknown fields are errors), then what the deployment relies on that a schema cannot see.

usage: check.py [--k8s-version 1.30.0] [--schema-only] RENDERED.yaml
Exits 1 with one line per problem.
"""

import argparse
import sys

import kubernetes_validate
import yaml


def schema_problems(objects, version):
    problems = []
    for obj in objects:
        where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            problems.append(f"{where}: schema: {path}: {e.message}")
        except (kubernetes_validate.SchemaNotFoundError,
                kubernetes_validate.VersionNotSupportedError) as e:
            problems.append(f"{where}: no schema: {e}")
    return problems


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == kind}


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check_workload(name, obj, config_maps, problems):
    pod = obj["spec"]["template"]
    spec = pod["spec"]
    labels = pod["metadata"].get("labels", {})
    selector = obj["spec"]["selector"]["matchLabels"]
    if any(labels.get(k) != v for k, v in selector.items()):
        problems.append(f"{name}: selector {selector} does not match pod labels {labels}")
    notes = pod["metadata"].get("annotations", {})
    if notes.get("prometheus.io/scrape") != "true":
        problems.append(f"{name}: pod template lacks prometheus.io/scrape: \"true\"")
    for volume in spec.get("volumes", []):
        cm = volume.get("configMap", {}).get("name")
        if cm is not None and cm not in config_maps:
            problems.append(f"{name}: volume {volume['name']} names unknown ConfigMap {cm}")
    for c in spec["containers"]:
        where = f"{name}/{c['name']}"
        ports = {p["containerPort"] for p in c.get("ports", [])}
        for probe in ("livenessProbe", "readinessProbe"):
            grpc = c.get(probe, {}).get("grpc")
            # With TLS, kubelet's gRPC probe (plaintext) cannot ask: `fleetrl health` can.
            command = c.get(probe, {}).get("exec", {}).get("command", [])
            if grpc is not None:
                port = grpc["port"]
            elif command[:2] == ["fleetrl", "health"] and len(command) == 3:
                port = int(command[2].rsplit(":", 1)[-1])
            else:
                problems.append(f"{where}: {probe} is neither a gRPC health probe nor `fleetrl health`")
                continue
            if port not in ports:
                problems.append(f"{where}: {probe} port {port} is not a container port")
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            missing = {"cpu", "memory"} - set(res.get(part, {}))
            if missing:
                problems.append(f"{where}: resources.{part} lacks {sorted(missing)}")
        metrics = env_of(c).get("FLEETRL_METRICS_LISTEN", "")
        port = notes.get("prometheus.io/port")
        if not metrics.endswith(f":{port}") or int(port or 0) not in ports:
            problems.append(
                f"{where}: metrics listen {metrics!r} vs prometheus.io/port {port!r} vs ports {ports}")


def check_addresses(workloads, services, problems):
    """FLEETRL_*_ADDR must name a Service and one of its ports."""
    for name, obj in workloads.items():
        for c in obj["spec"]["template"]["spec"]["containers"]:
            for key, value in env_of(c).items():
                if not key.endswith("_ADDR") or value is None:
                    continue
                host, _, port = value.rpartition(":")
                svc = services.get(host)
                if svc is None:
                    problems.append(f"{name}: {key}={value} names no Service")
                elif int(port) not in {p["port"] for p in svc["spec"]["ports"]}:
                    problems.append(f"{name}: {key}={value}: Service {host} has no port {port}")


def check_gpu(learner, problems):
    c = learner["spec"]["template"]["spec"]["containers"][0]
    wants = "learner.device=cuda" in " ".join(c.get("args", []))
    gets = "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
    if wants != gets:
        problems.append(
            f"fleetrl-learner: learner.device=cuda is {wants} but an nvidia.com/gpu limit is {gets}")


def semantic_problems(objects):
    problems = []
    deployments = by_kind(objects, "Deployment")
    stateful = by_kind(objects, "StatefulSet")
    services = by_kind(objects, "Service")
    config_maps = by_kind(objects, "ConfigMap")
    for kind, name, table in (("Deployment", "fleetrl-actor", deployments),
                              ("Deployment", "fleetrl-learner", deployments),
                              ("StatefulSet", "fleetrl-replay", stateful),
                              ("Service", "fleetrl-replay", services),
                              ("Service", "fleetrl-learner", services)):
        if name not in table:
            problems.append(f"missing {kind}/{name}")
    if problems:
        return problems
    if not stateful["fleetrl-replay"]["spec"].get("volumeClaimTemplates"):
        problems.append("StatefulSet/fleetrl-replay has no volumeClaimTemplates")
    if not any("run.toml" in cm.get("data", {}) for cm in config_maps.values()):
        problems.append("no ConfigMap carries run.toml")
    workloads = {**deployments, **stateful}
    for name, obj in workloads.items():
        check_workload(name, obj, config_maps, problems)
    check_addresses(workloads, services, problems)
    for name, svc in services.items():
        selector = svc["spec"].get("selector", {})
        if not any(all(o["spec"]["template"]["metadata"]["labels"].get(k) == v
                       for k, v in selector.items()) for o in workloads.values()):
            problems.append(f"Service/{name}: selector {selector} matches no pod template")
    check_gpu(deployments["fleetrl-learner"], problems)
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--k8s-version", default="1.30.0")
    parser.add_argument("--schema-only", action="store_true")
    parser.add_argument("rendered")
    args = parser.parse_args()
    with open(args.rendered) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    problems = schema_problems(objects, args.k8s_version)
    if not args.schema_only and not problems:
        problems = semantic_problems(objects)
    for p in problems:
        print(f"{args.rendered}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    kinds = sorted({o["kind"] for o in objects})
    print(f"[validate] {args.rendered}: {len(objects)} objects valid for Kubernetes "
          f"{args.k8s_version} ({', '.join(kinds)})")


if __name__ == "__main__":
    main()
