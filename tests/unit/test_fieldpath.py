from __future__ import annotations

import copy
from typing import Any

import pytest

from gitops_sync.plan.fieldpath import (
    MISSING,
    SET,
    Field,
    Index,
    Key,
    Path,
    Value,
    format_path,
    get,
    go_unquote,
    item_key,
    leaf_paths,
    leaves,
    list_keys,
    parse,
    remove,
    resolve,
)

# Paths exactly as the API server prints them (structured-merge-diff Path.String()).
SERVER_PATHS = [
    ".spec.replicas",
    ".metadata.labels.app",
    ".metadata.labels.app.kubernetes.io/name",
    ".metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
    '.spec.template.spec.containers[name="api"].image',
    '.spec.template.spec.containers[name="api"].env[name="LOG_LEVEL"].value',
    '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name',
    '.spec.ports[port=80,protocol="TCP"].targetPort',
    '.metadata.finalizers[="kubernetes.io/pvc-protection"]',
    ".spec.template.spec.containers[0].args[1]",
    '.metadata.ownerReferences[uid="6f1c2a9e-1b2c-4d5e-8f90-123456789abc"]',
    '.spec.topologySpreadConstraints[topologyKey="zone",whenUnsatisfiable="DoNotSchedule"]',
    ".spec.x[=42]",
    ".spec.x[=1.5]",
    ".spec.x[=true]",
    ".spec.x[=null]",
    '.data.a[="say \\"hi\\"\\n"]',
    '.spec.k[a=-3,b="é"]',
    "",
]


@pytest.mark.parametrize("text", SERVER_PATHS)
def test_parse_format_round_trip(text: str) -> None:
    path = parse(text)
    assert path.format() == text
    assert str(path) == text
    assert format_path(tuple(path)) == text
    assert Path.parse(text) == path


@pytest.mark.parametrize(
    ("text", "elements"),
    [
        (".spec.replicas", [Field("spec"), Field("replicas")]),
        ('.a[name="api"].b', [Field("a"), Key.of({"name": "api"}), Field("b")]),
        ('.p[protocol="TCP",port=80]', [Field("p"), Key.of({"port": 80, "protocol": "TCP"})]),
        ('.f[="x"]', [Field("f"), Value.of("x")]),
        (".f[=7]", [Field("f"), Value.of(7)]),
        (".args[12]", [Field("args"), Index(12)]),
        ('.k[a="x\\ty",b=false,c=null,d=2.5]', [Field("k"), Key.of({"a": "x\ty", "b": False, "c": None, "d": 2.5})]),
    ],
)
def test_parse_elements(text: str, elements: list[Any]) -> None:
    assert list(parse(text)) == elements


def test_unsorted_key_fields_are_canonicalised() -> None:
    # The server sorts key fields by name; a hand-written path in another order means the same item.
    assert parse('.p[protocol="TCP",port=80]').format() == '.p[port=80,protocol="TCP"]'


def test_key_values_json_exact() -> None:
    assert Key.of({"port": 80}) == Key.of({"port": 80.0})  # integral floats are the same JSON number
    assert Key.of({"port": 80}) != Key.of({"port": "80"})  # intOrString: different items
    assert Key.of({"a": True}) != Key.of({"a": 1})
    assert Key.of({"port": 80, "protocol": "TCP"}).fields == {"port": 80, "protocol": "TCP"}
    assert Value.of("x").value == "x"


@pytest.mark.parametrize(
    ("quoted", "text"),
    [('"plain"', "plain"), ('"a\\"b"', 'a"b'), ('"\\x01\\u00e9\\U0001f600"', "\x01é😀"), ('"\\101"', "A")],
)
def test_go_unquote(quoted: str, text: str) -> None:
    assert go_unquote(quoted) == text


@pytest.mark.parametrize("bad", ["spec", ".a[", '.a[name="x"', ".a[name=]x", ".a[=bogus]", '.a["x"]', '.a[="\\q"]'])
def test_parse_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid field path"):
        parse(bad)


def test_path_helpers() -> None:
    path = parse('.spec.containers[name="api"].image')
    assert path.parent.format() == '.spec.containers[name="api"]'
    assert [p.format() for p in path.prefixes()] == ['.spec.containers[name="api"]', ".spec.containers", ".spec"]
    assert path.startswith(parse(".spec.containers"))
    assert not path.startswith(parse(".spec.initContainers"))
    assert path.child(Field("x")).format() == '.spec.containers[name="api"].image.x'
    assert repr(parse(".a")) == "Path('.a')"
    assert isinstance(path.parent, Path)


DEPLOY: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "minha-api",
        "labels": {"app": "short", "app.kubernetes.io/name": "minha-api"},
        "finalizers": ["example.com/a", "example.com/b"],
    },
    "spec": {
        "replicas": 3,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "api",
                        "image": "ghcr.io/x/api:1.0",
                        "args": ["--port", "8080"],
                        "ports": [{"containerPort": 8080, "name": "http"}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    },
                    {"name": "sidecar", "image": "envoy:1"},
                ]
            }
        },
    },
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (".spec.replicas", 3),
        (".metadata.labels.app", "short"),
        (".metadata.labels.app.kubernetes.io/name", "minha-api"),
        ('.spec.template.spec.containers[name="api"].image', "ghcr.io/x/api:1.0"),
        ('.spec.template.spec.containers[name="sidecar"].image', "envoy:1"),
        ('.spec.template.spec.containers[name="api"].env[name="B"].value', "2"),
        # desired port without protocol is the server's protocol="TCP" item
        ('.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name', "http"),
        ('.spec.template.spec.containers[name="api"].args[1]', "8080"),
        ('.metadata.finalizers[="example.com/b"]', "example.com/b"),
        (".spec.missing", MISSING),
        ('.spec.template.spec.containers[name="nope"].image', MISSING),
        ('.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="UDP"].name', MISSING),
        ('.spec.template.spec.containers[name="api"].args[2]', MISSING),
        ('.metadata.finalizers[="example.com/z"]', MISSING),
        (".spec.replicas.deeper", MISSING),
        (".metadata.labels.app.kubernetes", MISSING),
        ('.spec[name="x"]', MISSING),
    ],
)
def test_get(path: str, value: Any) -> None:
    assert get(DEPLOY, path) == value
    assert get(DEPLOY, parse(path)) == value


def test_get_distinguishes_null_from_missing() -> None:
    assert get({"a": None}, ".a") is None
    assert get({"a": None}, ".b") is MISSING
    assert not MISSING
    assert repr(MISSING) == "MISSING"


def test_dotted_keys_prefer_exact_elements_then_rejoin() -> None:
    obj = {"data": {"config": {"yaml": "nested"}, "config.yaml": "flat"}}
    assert get(obj, ".data.config.yaml") == "nested"  # exact elements win
    assert get(obj, Path([Field("data"), Field("config.yaml")])) == "flat"
    assert resolve(DEPLOY, ".metadata.labels.app.kubernetes.io/name") == Path(
        [Field("metadata"), Field("labels"), Field("app.kubernetes.io/name")]
    )
    assert resolve(DEPLOY, ".nope") is None
    resolved = resolve(DEPLOY, '.spec.template.spec.containers[name="api"].image')
    assert resolved is not None and resolved.format() == '.spec.template.spec.containers[name="api"].image'


@pytest.mark.parametrize(
    ("path", "check"),
    [
        (".spec.replicas", lambda o: "replicas" not in o["spec"]),
        (".metadata.labels.app.kubernetes.io/name", lambda o: o["metadata"]["labels"] == {"app": "short"}),
        (
            '.spec.template.spec.containers[name="api"].image',
            lambda o: o["spec"]["template"]["spec"]["containers"][0].keys() == {"name", "args", "ports", "env"},
        ),
        (
            '.spec.template.spec.containers[name="sidecar"]',
            lambda o: [c["name"] for c in o["spec"]["template"]["spec"]["containers"]] == ["api"],
        ),
        (
            '.spec.template.spec.containers[name="api"].name',  # a key field: the item keeps it
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["name"] == "api",
        ),
        (
            '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name',
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080}],
        ),
        (
            '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].containerPort',
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 8080,
        ),
        ('.metadata.finalizers[="example.com/a"]', lambda o: o["metadata"]["finalizers"] == ["example.com/b"]),
        (
            '.spec.template.spec.containers[name="api"].args[0]',
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["args"] == ["8080"],
        ),
        (".spec.absent", lambda o: o == DEPLOY),
        ("", lambda o: o == DEPLOY),
    ],
)
def test_remove(path: str, check: Any) -> None:
    before = copy.deepcopy(DEPLOY)
    out = remove(DEPLOY, path)
    assert check(out)
    assert before == DEPLOY  # never mutates its input
    assert out is not DEPLOY


@pytest.mark.parametrize(
    ("obj", "path", "expected"),
    [
        ({"metadata": {"name": "x", "labels": {"a": "1"}}}, ".metadata.labels.a", {"metadata": {"name": "x"}}),
        ({"spec": {"replicas": 3}, "kind": "D"}, ".spec.replicas", {"kind": "D"}),
        ({"spec": {"s": {"r": {"m": 1}}, "k": 1}}, ".spec.s.r.m", {"spec": {"k": 1}}),
        ({"metadata": {"finalizers": ["a"]}}, '.metadata.finalizers[="a"]', {}),
        ({"c": [{"name": "a", "x": {"y": 1}}]}, '.c[name="a"].x.y', {"c": [{"name": "a"}]}),
        ({"c": [{"name": "a", "x": 1}]}, '.c[name="a"].x', {"c": [{"name": "a"}]}),
        ({"a": {"b": {}, "c": 1}}, ".a.c", {"a": {"b": {}}}),  # an empty map we set ourselves stays
    ],
)
def test_remove_prunes_what_it_emptied(obj: dict[str, Any], path: str, expected: dict[str, Any]) -> None:
    assert remove(obj, path) == expected


def test_remove_keeps_everything_else() -> None:
    out = remove(DEPLOY, ".spec.replicas")
    expected = copy.deepcopy(DEPLOY)
    del expected["spec"]["replicas"]
    assert out == expected


@pytest.mark.parametrize(
    ("path", "items", "kind", "keys"),
    [
        (".spec.template.spec.containers", [{"name": "a"}], "Deployment", ("name",)),
        (".spec.initContainers", [{"name": "a"}], "Pod", ("name",)),
        ('.spec.containers[name="a"].env', [{"name": "X"}], "Pod", ("name",)),
        (".spec.volumes", [{"name": "v"}], "Pod", ("name",)),
        ('.spec.containers[name="a"].volumeMounts', [{"mountPath": "/d", "name": "v"}], "Pod", ("mountPath",)),
        ('.spec.containers[name="a"].ports', [{"containerPort": 80}], "Pod", ("containerPort", "protocol")),
        (".spec.ports", [{"port": 80}], "Service", ("port", "protocol")),
        (".spec.ports", [{"port": 80}], None, ("port", "protocol")),
        (".spec.ports", [{"port": 80}], "Other", None),
        (".spec.imagePullSecrets", [{"name": "reg"}], "Pod", ("name",)),
        (".spec.tolerations", [{"key": "k", "operator": "Exists"}], "Pod", None),
        ('.spec.containers[name="a"].envFrom', [{"configMapRef": {"name": "c"}}], "Pod", None),
        (".metadata.finalizers", ["a", "b"], "Pod", SET),
        (".metadata.finalizers", ["a", "a"], "Pod", None),
        (".spec.finalizers", ["kubernetes"], "Namespace", None),
        (".metadata.ownerReferences", [{"uid": "u", "name": "x"}], "Pod", ("uid",)),
        (".status.conditions", [{"type": "Ready"}], "Pod", ("type",)),
        (".spec.hostAliases", [{"ip": "1.2.3.4"}], "Pod", ("ip",)),
        (
            ".spec.topologySpreadConstraints",
            [{"topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
            "Pod",
            ("topologyKey", "whenUnsatisfiable"),
        ),
        (".spec.rules", [{"name": "a"}, {"name": "b"}], "Custom", ("name",)),
        (".spec.rules", [{"name": "a"}, {"name": "a"}], "Custom", None),  # not unique: atomic
        (".spec.rules", [{"name": "a"}, {"host": "b"}], "Custom", None),
        (".spec.containers", [{"image": "no-name"}], "Pod", None),  # key missing: atomic
        (".spec.args", ["a"], "Pod", None),
        (".spec.hosts", ["a", "b"], "Custom", None),
    ],
)
def test_list_keys(path: str, items: list[Any], kind: str | None, keys: Any) -> None:
    assert list_keys(parse(path), items, kind) == keys


def test_item_key_defaults_protocol() -> None:
    assert (
        item_key({"containerPort": 80}, ("containerPort", "protocol")).format() == '[containerPort=80,protocol="TCP"]'
    )
    assert item_key({"port": 53, "protocol": "UDP"}, ("port", "protocol")).format() == '[port=53,protocol="UDP"]'


def test_leaf_paths_of_a_deployment() -> None:
    assert leaf_paths(DEPLOY) == [
        ".apiVersion",
        ".kind",
        ".metadata.name",
        ".metadata.labels.app",
        ".metadata.labels.app.kubernetes.io/name",
        '.metadata.finalizers[="example.com/a"]',
        '.metadata.finalizers[="example.com/b"]',
        ".spec.replicas",
        '.spec.template.spec.containers[name="api"].name',
        '.spec.template.spec.containers[name="api"].image',
        '.spec.template.spec.containers[name="api"].args',
        '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].containerPort',
        '.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name',
        '.spec.template.spec.containers[name="api"].env[name="A"].name',
        '.spec.template.spec.containers[name="api"].env[name="A"].value',
        '.spec.template.spec.containers[name="api"].env[name="B"].name',
        '.spec.template.spec.containers[name="api"].env[name="B"].value',
        '.spec.template.spec.containers[name="sidecar"].name',
        '.spec.template.spec.containers[name="sidecar"].image',
    ]


def test_leaves_values_and_special_leaves() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "spec": {
            "ports": [{"port": 80, "targetPort": "http"}, {"port": 53, "protocol": "UDP"}],
            "selector": {},
            "externalIPs": [],
        },
    }
    got = {p.format(): v for p, v in leaves(service)}
    assert got['.spec.ports[port=80,protocol="TCP"].targetPort'] == "http"
    assert got['.spec.ports[port=53,protocol="UDP"].protocol'] == "UDP"
    assert got[".spec.selector"] == {}  # an empty map we set is a field we own
    assert got[".spec.externalIPs"] == []
    # every leaf path resolves back to its value
    for path, value in leaves(DEPLOY):
        assert get(DEPLOY, path) == value


def test_leaves_of_a_kindless_fragment() -> None:
    assert leaf_paths({"spec": {"ports": [{"port": 1}]}}) == ['.spec.ports[port=1,protocol="TCP"].port']
