"""warm_plugin_loaders: load the filter and test plugins once, in ansible-playbook's own process.

Ansible forks a worker for every task and host, and a worker loads every filter and test plugin
file of the play the first time it templates anything, then exits with them: on 2 cores that was
0.05-0.1 s of each of a launch's 30 tasks (docs/benchmarks.md). Loaded here, as each play starts
(its roles' plugin directories are known by then), every worker inherits them from the fork.
Ansible drops these caches itself when a plugin directory is added later, so no plugin is missed.

Always on for the project's playbooks: Ansible adds a playbook's adjacent callback_plugins/
directory itself, and this plugin needs no enabling; it prints nothing.
"""

DOCUMENTATION = r"""
name: warm_plugin_loaders
type: aggregate
short_description: Load the filter and test plugins before Ansible forks its task workers
description:
  - Loads every filter and test plugin of the play in the controller's main process as each play
    starts, so that the worker forked for each task inherits them instead of loading them again.
  - Changes no output and no result; only how long each task takes.
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "warm_plugin_loaders"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_play_start(self, play):
        # Asking for one plugin by its short name makes a Jinja plugin loader load every plugin
        # file of its paths (the role's included) and keep them; these two are builtin.
        filter_loader.get("bool")
        test_loader.get("file")
