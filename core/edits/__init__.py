"""Explicit changes to stored memory, each kept as a version: editing and deleting messages
(``messages``), editing and deleting observation lines (``observations``), forgetting a resource
everywhere (``forget``). The tables are in ``schema``. ``Memory`` exposes these as
``edit_message``, ``delete_messages``, ``undo_message_edit``, ``edit_observation``, ...,
``forget_resource``.
"""
