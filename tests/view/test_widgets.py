"""grpo_kit.view.widgets.redraw_on_change: the Output + observe pattern the notebooks' sliders use."""
import matplotlib

matplotlib.use("Agg")


def test_redraw_on_change_draws_once_then_on_every_change_with_the_new_values():
    import ipywidgets as w
    import matplotlib.pyplot as plt

    from grpo_kit.view.widgets import redraw_on_change

    a = w.IntSlider(value=1, min=0, max=8)
    b = w.ToggleButtons(options=["group", "none"], value="group")
    seen = []

    def figure():
        seen.append((a.value, b.value))
        fig, _ = plt.subplots()
        return fig

    out = redraw_on_change([a, b], figure)
    assert isinstance(out, w.Output)
    assert seen == [(1, "group")]                    # drawn once, at once (what a headless run shows)
    a.value = 3
    b.value = "none"
    assert seen == [(1, "group"), (3, "group"), (3, "none")]
    a.value = 3                                       # no change, no redraw
    assert len(seen) == 3
