"""The Textual control room: screens, widgets and the App that wires them to the core.

Nothing here computes benchmark figures or manages processes: the App talks to the core through
one small adapter (`adapter.ControlAdapter`), in-process or attached to a detached runner, and
renders the events and store rows the core produces.
"""
