"""``gridctl dash``: a Textual dashboard over the controller's status document.

``viewmodel.build_view`` (pure) turns the status JSON into rows; the widgets
under ``widgets/`` render them; ``client`` reads status and sends the two
operator requests (mode, tick). See ``app.build_app``.
"""
