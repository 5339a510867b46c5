"""The test-suite runs with the toy families registered (``toy`` is the family of a config that
names none). Here rather than in conftest so that processes spawned by tests (they import
``tests.<module>``) register them too."""

from speechtrain.testing.toy import register

register()
