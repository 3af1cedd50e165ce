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
    if spec.get("shareProcessNamespace") is not True:
        # Otherwise the role is its container's PID 1, which drops a SIGTERM that comes before
        # the role listens for it, and the pod waits out its whole grace period.
        problems.append(f"{name}: pod template lacks shareProcessNamespace: true (the role would be PID 1)")
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


def learner_settings(container):
    """The learner's `--set key=value` arguments, `$(VAR)` replaced by the container's env:
    a literal value, or `<pod name>` for the downward API's metadata.name."""
    env = {}
    for e in container.get("env", []):
        field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[e["name"]] = "<pod name>" if field == "metadata.name" else e.get("value")
    args = container.get("args", [])
    settings = {}
    for flag, value in zip(args, args[1:]):
        if flag != "--set":
            continue
        for name, env_value in env.items():
            value = value.replace(f"$({name})", str(env_value))
        key, _, value = value.partition("=")
        settings[key] = value
    return settings


def check_gpu(learner, problems):
    """learner.device=cuda exactly when the pod asks for a GPU: one per pod, so one per rank."""
    c = learner["spec"]["template"]["spec"]["containers"][0]
    wants = learner_settings(c).get("learner.device", "").startswith("cuda")
    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if wants != (gpus is not None):
        problems.append(
            f"fleetrl-learner: learner.device=cuda is {wants} but an nvidia.com/gpu limit is "
            f"{gpus is not None}")
    elif wants and str(gpus) != "1":
        problems.append(f"fleetrl-learner: each rank (pod) trains on one GPU, but asks for {gpus}")


def check_ranks(learner, services, problems):
    """The learner's pods are its ranks: learner.world_size is the StatefulSet's replicas, each
    pod's rank is its ordinal, and learner.rendezvous names pod 0 through a headless Service
    that publishes it before it is ready (a rank is ready only once all have joined)."""
    spec = learner["spec"]
    replicas = spec.get("replicas", 1)
    c = spec["template"]["spec"]["containers"][0]
    settings = learner_settings(c)
    where = "StatefulSet/fleetrl-learner"
    world = settings.get("learner.world_size", "1")
    if world != str(replicas):
        problems.append(f"{where}: learner.world_size={world} but replicas: {replicas}")
    rank = settings.get("learner.rank", "0")
    if replicas > 1 and rank != "<pod name>":
        problems.append(
            f"{where}: learner.rank={rank} is the same in every pod; pass the pod's name "
            "(downward API metadata.name), whose ordinal is the rank")
    if replicas > 1 and spec.get("podManagementPolicy") != "Parallel":
        problems.append(
            f"{where}: podManagementPolicy must be Parallel: pod 0 is not ready before pod 1 "
            "has joined it, so ordered start-up never starts pod 1")
    host, _, port = settings.get("learner.rendezvous", "").rpartition(":")
    service_name = spec.get("serviceName")
    expected = f"{learner['metadata']['name']}-0.{service_name}"
    if host != expected:
        problems.append(f"{where}: learner.rendezvous host {host!r} is not pod 0's name {expected!r}")
        return
    svc = services.get(service_name)
    if svc is None:
        problems.append(f"{where}: serviceName {service_name} names no Service")
        return
    if svc["spec"].get("clusterIP") != "None" or not svc["spec"].get("publishNotReadyAddresses"):
        problems.append(
            f"Service/{service_name}: the ranks' Service must be headless (clusterIP: None) "
            "with publishNotReadyAddresses: true")
    ports = {p["containerPort"] for p in c.get("ports", [])}
    if not port.isdigit() or int(port) not in ports or int(port) not in {
            p["port"] for p in svc["spec"]["ports"]}:
        problems.append(
            f"{where}: rendezvous port {port!r} must be a container port and a port of "
            f"Service/{service_name}")


def selects(selector, workload):
    """Whether a Service selector picks pods of `workload`: its template's labels, plus the
    StatefulSet controller's pod-name label for an ordinal below replicas."""
    labels = dict(workload["spec"]["template"]["metadata"]["labels"])
    pod = selector.get("statefulset.kubernetes.io/pod-name")
    if pod is not None and workload["kind"] == "StatefulSet":
        name = workload["metadata"]["name"]
        ordinal = pod[len(name) + 1:] if pod.startswith(name + "-") else ""
        if ordinal.isdigit() and int(ordinal) < workload["spec"].get("replicas", 1):
            labels["statefulset.kubernetes.io/pod-name"] = pod
    return all(labels.get(k) == v for k, v in selector.items())


def semantic_problems(objects):
    problems = []
    deployments = by_kind(objects, "Deployment")
    stateful = by_kind(objects, "StatefulSet")
    services = by_kind(objects, "Service")
    config_maps = by_kind(objects, "ConfigMap")
    for kind, name, table in (("Deployment", "fleetrl-actor", deployments),
                              ("Deployment", "fleetrl-serve", deployments),
                              ("Service", "fleetrl-serve", services),
                              ("StatefulSet", "fleetrl-learner", stateful),
                              ("StatefulSet", "fleetrl-replay", stateful),
                              ("Service", "fleetrl-replay", services),
                              ("Service", "fleetrl-learner", services)):
        if name not in table:
            problems.append(f"missing {kind}/{name}")
    if problems:
        return problems
    for name in ("fleetrl-replay", "fleetrl-learner"):
        if not stateful[name]["spec"].get("volumeClaimTemplates"):
            problems.append(f"StatefulSet/{name} has no volumeClaimTemplates")
    if not any("run.toml" in cm.get("data", {}) for cm in config_maps.values()):
        problems.append("no ConfigMap carries run.toml")
    workloads = {**deployments, **stateful}
    for name, obj in workloads.items():
        check_workload(name, obj, config_maps, problems)
    check_addresses(workloads, services, problems)
    for name, svc in services.items():
        selector = svc["spec"].get("selector", {})
        if not any(selects(selector, o) for o in workloads.values()):
            problems.append(f"Service/{name}: selector {selector} matches no pod template")
    # The actors' learner is rank 0, however many ranks there are.
    learner = stateful["fleetrl-learner"]
    rank0 = services["fleetrl-learner"]["spec"].get("selector", {})
    if rank0.get("statefulset.kubernetes.io/pod-name") != "fleetrl-learner-0":
        problems.append(
            "Service/fleetrl-learner: must select rank 0 alone "
            "(statefulset.kubernetes.io/pod-name: fleetrl-learner-0), the rank that serves actors")
    check_ranks(learner, services, problems)
    check_gpu(learner, problems)
    # The policy server follows the learner the actors follow.
    leader = {name: env_of(o["spec"]["template"]["spec"]["containers"][0]).get("FLEETRL_LEARNER_ADDR")
              for name, o in deployments.items() if name in ("fleetrl-actor", "fleetrl-serve")}
    if leader["fleetrl-serve"] != leader["fleetrl-actor"]:
        problems.append(
            f"fleetrl-serve: follows FLEETRL_LEARNER_ADDR={leader['fleetrl-serve']}, the actors "
            f"{leader['fleetrl-actor']}")
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
