"""Every public callable of mstar_c has a signature inspect can read (issue 28): the C methods and
functions carry the text-signature docstring ("name($self, ...)\\n--\\n\\n"), so help() and IDEs
show their parameters."""
import inspect

import mstar_c


def _public_callables():
    for name in mstar_c.__all__:
        obj = getattr(mstar_c, name)
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue
            seen = set()
            for klass in obj.__mro__:
                if klass is object:
                    continue
                for attr, v in vars(klass).items():
                    public = not attr.startswith("_") or attr in (
                        "__init__", "__enter__", "__exit__", "__dlpack__", "__dlpack_device__")
                    if public and attr not in seen and callable(v):
                        seen.add(attr)
                        yield f"{name}.{attr}", getattr(obj, attr)
        elif callable(obj):
            yield name, obj


def test_every_public_callable_has_a_signature():
    missing = []
    count = 0
    for name, obj in _public_callables():
        count += 1
        try:
            inspect.signature(obj)
        except (TypeError, ValueError):
            missing.append(name)
    assert count > 60 and missing == []


def test_signatures_name_the_parameters():
    mgr = mstar_c.CommunicationManager
    assert list(inspect.signature(mgr.get_ready_tensors).parameters) == [
        "self", "graph_walk", "with_failures"]
    assert "sharding_config" in inspect.signature(mgr.register_request).parameters
    assert list(inspect.signature(mgr.send_outputs).parameters) == [
        "self", "peer", "request_id", "outputs", "next_node", "node_name", "graph_walk"]
    assert list(inspect.signature(mstar_c.fanout).parameters)[:2] == ["edge", "shard_dim"]
    assert list(inspect.signature(mstar_c.Tensor.check).parameters) == ["self"]
    assert "libmstar" in mstar_c.version.__doc__
