"""Entry-point discovery: a broken plugin is one warning line, the others still load."""
import vitx.plugins as plugins
from vitx.registry import OBJECTIVES


class FakeEntryPoint:
    def __init__(self, name, load):
        self.name, self.value, self.dist, self._load = name, f"{name}_module", None, load

    def load(self):
        return self._load()


def test_broken_plugin_is_reported_and_others_load(monkeypatch, capsys):
    def good():
        OBJECTIVES.register("fake-good", object, description="registered by a fake plugin", overwrite=True)

    def bad():
        raise ImportError("No module named 'missing_dependency'")

    monkeypatch.setattr(plugins, "entry_points", lambda group: [FakeEntryPoint("broken", bad),
                                                                FakeEntryPoint("good", good)])
    monkeypatch.setattr(plugins, "_done", False)
    monkeypatch.setattr(plugins, "loaded", {})
    monkeypatch.setattr(plugins, "failed", {})
    try:
        plugins.load_plugins()
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["warning: vitx plugin 'broken' failed to load: ImportError: No module named 'missing_dependency'"]
        assert OBJECTIVES.get("fake-good").source == "entry point good (good_module)"
        assert list(plugins.loaded) == ["good"] and list(plugins.failed) == ["broken"]
    finally:
        OBJECTIVES._entries.pop("fake-good", None)
