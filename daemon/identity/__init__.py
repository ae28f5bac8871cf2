"""Users, API keys and project grants: the replicated directory (issue 7).

* :mod:`daemon.identity.secrets` -- key secrets, their hashes and ids,
  scrypt password hashes;
* :mod:`daemon.identity.replicated_directory` -- :class:`ReplicatedDirectory`,
  the :class:`common.policy.Directory` a presented key resolves through
  (cache, read-quorum lease, revocation safety);
* :mod:`daemon.identity.memory_directory` -- the in-memory directories: the
  keys of the node's own ``[auth]`` section, and the chain that asks them
  before the replicated one;
* :mod:`daemon.identity.admin` -- the administrative actions (users, keys,
  grants) as quorum writes;
* :mod:`daemon.identity.bootstrap` -- the first root key, written straight
  into a node's database (``user add --root --db``, ``AI_MEMORY_ROOT_KEY``).

The records themselves are ops (``user.put``, ``apikey.put``, ``pgrant.put``,
see :mod:`common.ops`) merged by :mod:`store.apply` and read by
:mod:`store.identity`.
"""
