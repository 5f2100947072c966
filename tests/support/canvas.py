"""Texts of a drawn figure that leave its canvas (a chart whose text is cut: issue 56)."""


def _inside_view(tick, axis) -> bool:
    low, high = sorted(axis.get_view_interval())
    return low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low)


def _drawn_texts(figure) -> list:
    """Every text matplotlib draws: the figure's, each panel's titles, labels, legend and
    notes, and the tick labels of the ticks inside the view (the others are not drawn)."""
    texts = [*figure.texts, *([figure._suptitle] if figure._suptitle else [])]
    for axes in figure.axes:
        texts += [axes.title, axes._left_title, axes._right_title, axes.xaxis.label,
                  axes.yaxis.label, *axes.texts]
        if axes.get_legend():
            texts += axes.get_legend().get_texts()
        for axis in (axes.xaxis, axes.yaxis):
            texts += [tick.label1 for tick in axis.get_major_ticks() if _inside_view(tick, axis)]
    return [text for text in texts if text.get_visible() and text.get_text()]


def texts_outside(figure) -> list[str]:
    """Each drawn text whose box (matplotlib's tight bbox, as drawn) is not within the canvas;
    the figure is drawn here."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    width, height = figure.bbox.width, figure.bbox.height
    texts = _drawn_texts(figure)
    assert texts, "nothing drawn"
    boxes = [(text.get_text(), text.get_tightbbox(renderer)) for text in texts]
    return [words for words, box in boxes
            if box.x0 < 0 or box.y0 < 0 or box.x1 > width or box.y1 > height]
