"""The Gradio page over an :class:`~linearizer.explore.session.Explorer` (``pip install
linearizer[app]``). Only the tabs that apply to the run are built. Every handler answers bad input
(a non-image upload, one over the size limit, an out-of-range value) with a message in the page,
and the server keeps serving.

>>> app = build_app(open_run("runs/flow-cpu"))  # doctest: +SKIP
>>> app.launch(server_name="127.0.0.1", server_port=7860)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from ..errors import LinearizerError
from .flow_views import ALL, MAX_GUIDANCE, FlowViews
from .images import MAX_UPLOAD_BYTES, UPLOAD_HINT
from .projective_views import RESTORE_METHODS
from .session import FLOW_TABS, PROJECT_TAB, STYLE_TAB, Explorer, pick_picture

log = logging.getLogger(__name__)
HARD_UPLOAD_LIMIT = 8 * MAX_UPLOAD_BYTES  # Gradio refuses bigger requests before the handler
DRAW_HINT = (
    "Pick the brush (left of the canvas) and draw a digit, or upload a picture; an upload wins "
    "over the drawing."
)


def gradio() -> Any:
    """The ``gradio`` module, or a one-line error saying how to install it."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no calls home
    try:
        import gradio
    except ImportError:
        raise LinearizerError("the explorer needs Gradio: pip install linearizer[app]") from None
    return gradio


def guarded(fn: Callable[..., tuple], n_pictures: int) -> Callable[..., tuple]:
    """``fn`` whose failures become ``(None, ..., message)``: the page shows the message and
    the server carries on."""

    def handler(*args: Any) -> tuple:
        try:
            return fn(*args)
        except LinearizerError as e:
            message = f"⚠️ {e}"
        except Exception as e:  # keep serving; the log has the traceback
            log.exception("explorer handler %s failed", getattr(fn, "__name__", fn))
            message = f"⚠️ internal error ({type(e).__name__}: {e})"
        return (*([None] * n_pictures), message)

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def build_app(run: Any, **options: Any):
    """A ``gr.Blocks`` page for ``run`` (a loaded run, or an :class:`Explorer` of one; ``options``
    go to :class:`Explorer`)."""
    gr = gradio()
    ex = run if isinstance(run, Explorer) else Explorer(run, **options)
    with gr.Blocks(title=f"linearizer explore: {ex.name}") as demo:
        gr.Markdown(f"## linearizer explore\n{ex.describe()}")
        with gr.Tabs():
            if ex.flow:
                _generate_tab(gr, ex)
                _walk_tab(gr, ex, demo)
                _invert_tab(gr, ex)
            if ex.projective:
                _project_tab(gr, ex)
            if ex.style:
                _style_tab(gr, ex, demo)
    demo.explorer = ex  # for tests and the benchmark
    return demo


def launch(demo: Any, host: str = "127.0.0.1", port: int | None = None, block: bool = True):
    """Serve ``demo`` on ``host:port`` (one request at a time: the model is shared)."""
    demo.queue(default_concurrency_limit=1)
    return demo.launch(
        server_name=host,
        server_port=port,
        prevent_thread_lock=not block,
        max_file_size=HARD_UPLOAD_LIMIT,
        quiet=not block,
        footer_links=[],
    )


def _image(gr: Any, label: str, **kw: Any) -> Any:
    return gr.Image(label=label, type="numpy", interactive=False, format="png", height=240, **kw)


def _inputs(gr: Any, what: str = "picture") -> tuple[Any, Any]:
    gr.Markdown(DRAW_HINT)
    with gr.Row():
        draw = gr.Sketchpad(
            label=f"draw a {what}",
            type="numpy",
            canvas_size=(280, 280),
            brush=gr.Brush(default_size=22, colors=["#000000"]),
            fixed_canvas=True,
        )
        upload = gr.File(label=f"or upload ({UPLOAD_HINT})", type="filepath")
    return draw, upload


def _source(file: Any, picture: Any, seed: Any, fallback: str = "the sample of seed") -> str:
    if file:
        return "the upload"
    return "the drawing" if picture is not None else f"{fallback} {int(seed or 0)}"


# ----------------------------------------------------------------------------- flow tabs


def _condition(gr: Any, f: FlowViews, tab: str) -> list[Any]:
    """A mixture's component picker (a class-conditional run's class picker) and, when its
    components are classes, the guidance slider; none for one generator."""
    if not f.components:
        return []
    w = float(f.spec.guidance)
    with gr.Row():
        label = gr.Dropdown(
            f.class_choices,
            value=f.default_class,
            label=f"{f.noun} (mixture: drawn from the {f.drawn_from})",
            elem_id=f"{tab}-class",
        )
        if not f.guided:
            return [label]
        guidance = gr.Slider(
            0,
            max(MAX_GUIDANCE, w),  # a larger --guidance still shows on the slider
            value=w,
            step=0.5,
            label="guidance w",
            elem_id=f"{tab}-guidance",
        )
    return [label, guidance]


def _image_class(gr: Any, f: FlowViews) -> list[Any]:
    """A mixture's pickers of the inverted image's component (class) and the one to swap it to."""
    if not f.components:
        return []
    first = str(f.first.spec.component)
    label = gr.Dropdown(
        f.class_choices[1:], value=first, label=f"the image's {f.noun}", elem_id="invert-class"
    )
    swap = gr.Dropdown(
        [ALL, *f.class_choices[1:]], value=ALL, label=f"swap to {f.noun}", elem_id="swap-class"
    )
    return [label, swap]


def _generate_tab(gr: Any, ex: Explorer) -> None:
    f = ex.flow
    with gr.Tab(FLOW_TABS[0]):
        with gr.Row():
            seed = gr.Number(0, label="seed", precision=0)
            count = gr.Slider(1, 16, value=8, step=1, label="count")
            steps = gr.Slider(1, 1000, value=f.steps, step=1, label="T (solver steps)")
            method = gr.Radio(["euler", "rk4"], value=f.method, label="method")
        condition = _condition(gr, f, "generate")
        button = gr.Button("Generate", variant="primary", elem_id="generate-button")
        with gr.Row():
            one = _image(gr, "one step: g_data⁻¹(B g_noise(x0))", elem_id="one-step")
            multi = _image(gr, "multi-step solver", elem_id="multi-step")
        text = gr.Markdown(elem_id="generate-text")
        button.click(
            guarded(f.generate, 2),
            [seed, count, steps, method, *condition],
            [one, multi, text],
            api_name="generate",
        )


def _walk_tab(gr: Any, ex: Explorer, demo: Any) -> None:
    f = ex.flow
    with gr.Tab(FLOW_TABS[1]):
        gr.Markdown(
            "Move the noise's latent along the top singular directions of B "
            "(in standard deviations of each coordinate); the output moves along "
            "σᵢ uᵢ exactly."
        )
        with gr.Row():
            with gr.Column():
                seed = gr.Number(0, label="seed", precision=0, elem_id="walk-seed")
                condition = _condition(gr, f, "walk")
                sliders = [
                    gr.Slider(
                        -5,
                        5,
                        value=0,
                        step=0.1,
                        label=_walk_label(f, i, s),
                        elem_id=f"walk-c{i + 1}",
                    )
                    for i, s in enumerate(f.sigma[: f.k])
                ]
            with gr.Column():
                walked = _image(gr, "walked sample", elem_id="walked")
                base = _image(gr, "sample of the seed (c = 0)", elem_id="walk-base")
                text = gr.Markdown(elem_id="walk-text")

        def walk(seed: float, *values: Any) -> tuple:
            label, w = (*values[: len(condition)], None, None)[:2]
            return f.walk(int(seed or 0), values[len(condition) :], label, w)

        gr.on(
            [demo.load, seed.change, *(c.change for c in condition), *(s.change for s in sliders)],
            guarded(walk, 2),
            [seed, *condition, *sliders],
            [walked, base, text],
            api_name="walk",
            trigger_mode="always_last",
        )


def _walk_label(f: FlowViews, i: int, sigma: Any) -> str:
    # a mixture's σ depend on the component picked: the caption prints them
    return f"c{i + 1}" if f.components else f"c{i + 1} (σ{i + 1} = {float(sigma):.3g})"


def _invert_tab(gr: Any, ex: Explorer) -> None:
    f = ex.flow
    with gr.Tab(FLOW_TABS[2]):
        draw, upload = _inputs(gr, "digit")
        with gr.Row():
            seed = gr.Number(0, label="seed of the sample used when nothing is drawn", precision=0)
            classes = _image_class(gr, f)
            button = gr.Button("Invert", variant="primary", elem_id="invert-button")
        with gr.Row():
            seen = _image(gr, "input x as the model sees it", elem_id="invert-input")
            noise = _image(gr, "its noise x0 = g_noise⁻¹(B⁻¹ g_data(x))")
            again = _image(gr, "regenerated f(x0)")
        swap_label = f"x, then its noise drawn as each {f.noun}: g_data⁻¹(B_t B_c⁻¹ g_data(x))"
        swapped = [_image(gr, swap_label, elem_id="swap-strip")] if classes else []
        text = gr.Markdown(elem_id="invert-text")
        label = classes[0] if classes else None

        def invert(drawing: Any, file: Any, seed: float, *picked: Any) -> tuple:
            picture = pick_picture(file, drawing)
            source = _source(file, picture, seed)
            c = picked[0] if picked else None
            picture = f.sample_picture(int(seed or 0), c) if picture is None else picture
            *pictures, text = f.invert(picture, c)
            if not picked:
                return (*pictures, f"Input: {source}. {text}")
            strip, swap_text = f.swap(picture, c, picked[1])
            return (*pictures, strip, f"Input: {source}. {text}\n\n{swap_text}")

        outputs = [seen, noise, again, *swapped, text]
        gr.on(
            [button.click, *(c.change for c in classes)],
            guarded(invert, len(outputs) - 1),
            [draw, upload, seed, *classes],
            outputs,
            api_name="invert",
        )

        gr.Markdown("### Interpolate from the picture above to a second one")
        with gr.Row():
            second = gr.File(label=f"second picture ({UPLOAD_HINT})", type="filepath")
            seed_b = gr.Number(1, label="or the sample of this seed", precision=0)
            frames = gr.Slider(2, 16, value=8, step=1, label="frames")
        go = gr.Button("Interpolate")
        in_noise = _image(gr, "straight line between the two noises")
        in_latent = _image(gr, "straight line in the data network's induced space")
        text2 = gr.Markdown()

        def interpolate(
            drawing: Any,
            file: Any,
            seed: float,
            other: Any,
            seed_b: float,
            frames: float,
            c: Any = None,
        ) -> tuple:
            a = pick_picture(file, drawing)
            a = f.sample_picture(int(seed or 0), c) if a is None else a
            b = pick_picture(other, None)
            b = f.sample_picture(int(seed_b or 0), c) if b is None else b
            return f.interpolate(a, b, int(frames), c)

        go.click(
            guarded(interpolate, 2),
            [draw, upload, seed, second, seed_b, frames, *([label] if label else [])],
            [in_noise, in_latent, text2],
            api_name="interpolate",
        )


# ----------------------------------------------------------------------------- other runs


def _project_tab(gr: Any, ex: Explorer) -> None:
    p = ex.projective
    with gr.Tab(PROJECT_TAB):
        draw, upload = _inputs(gr, "digit")
        with gr.Row():
            corruption = gr.Dropdown(p.corruptions, value="none", label="corruption")
            seed = gr.Number(
                0, label="seed (corruption; noise input when nothing is drawn)", precision=0
            )
        button = gr.Button("Project", variant="primary", elem_id="project-button")
        with gr.Row():
            seen = _image(gr, "input x")
            once = _image(gr, "f(x)")
            twice = _image(gr, "f(f(x))")
        text = gr.Markdown(elem_id="project-text")

        def picked(drawing: Any, file: Any, seed: float):
            picture = pick_picture(file, drawing)
            return p.noise_input(int(seed or 0)) if picture is None else p.model_input(picture)

        def project(drawing: Any, file: Any, corruption: str, seed: float) -> tuple:
            *pictures, text = p.project(picked(drawing, file, seed), corruption, int(seed or 0))
            source = _source(file, pick_picture(file, drawing), seed, "noise of seed")
            return (*pictures, f"Input: {source}, {text}")

        button.click(
            guarded(project, 3),
            [draw, upload, corruption, seed],
            [seen, once, twice, text],
            api_name="project",
        )
        if p.tasks:
            gr.Markdown("### Restore: degrade the input exactly, then restore it")
            with gr.Row():
                task = gr.Dropdown(p.tasks, value=p.tasks[0], label="degradation")
                fix = gr.Button("Restore", elem_id="restore-button")
            label = "clean x | " + " | ".join(RESTORE_METHODS) + "  (pinv = H⁺y)"
            strip = _image(gr, label, elem_id="restore-strip")
            text2 = gr.Markdown(elem_id="restore-text")

            def restore(drawing: Any, file: Any, seed: float, task: str) -> tuple:
                return p.restore(picked(drawing, file, seed), task, int(seed or 0))

            fix.click(
                guarded(restore, 1), [draw, upload, seed, task], [strip, text2], api_name="restore"
            )


def _style_tab(gr: Any, ex: Explorer, demo: Any) -> None:
    s = ex.style
    with gr.Tab(STYLE_TAB):
        with gr.Row():
            name = gr.Dropdown(list(s.contents), value=next(iter(s.contents)), label="content")
            upload = gr.File(label=f"or upload a picture ({UPLOAD_HINT})", type="filepath")
        with gr.Row():
            shown = _image(gr, "content x")
            result = _image(gr, "styled")
        pure = _image(gr, f"each style alone: {', '.join(s.styles)}")
        text = gr.Markdown()

        def content(name: str, file: Any):
            return s.content(name, pick_picture(file, None))

        if s.is_bank:
            strength = gr.Slider(0, 2, value=1, step=0.05, label="strength a")
            weights = [
                gr.Slider(-1, 2, value=1.0 if i == 0 else 0.0, step=0.05, label=f"w[{n}]")
                for i, n in enumerate(s.styles)
            ]

            beside = _image(gr, "index model (authors' design)") if s.index_model else None

            def mix(name: str, file: Any, a: float, *w: float) -> tuple:
                x = content(name, file)
                shown, styled, formula = s.mix(x, w, a)
                if beside is None:
                    return shown, styled, s.pure_styles(x), formula
                try:
                    other, note = s.index_beside(x, w)
                except LinearizerError as e:
                    other, note = None, str(e)
                return shown, styled, s.pure_styles(x), other, f"{formula} Beside it: {note}."

            outputs = [shown, result, pure, *([beside] if beside else []), text]
            gr.on(
                [
                    demo.load,
                    name.change,
                    upload.change,
                    strength.change,
                    *(w.change for w in weights),
                ],
                guarded(mix, len(outputs) - 1),
                [name, upload, strength, *weights],
                outputs,
                api_name="style_mix",
                trigger_mode="always_last",
            )
        else:
            t = gr.Slider(0, len(s.styles) - 1, value=0, step=0.05, label="style index t")

            def index(name: str, file: Any, t: float) -> tuple:
                x = content(name, file)
                shown, styled, formula = s.at_index(x, t)
                return shown, styled, s.pure_styles(x), formula

            gr.on(
                [demo.load, name.change, upload.change, t.change],
                guarded(index, 3),
                [name, upload, t],
                [shown, result, pure, text],
                api_name="style_index",
                trigger_mode="always_last",
            )
