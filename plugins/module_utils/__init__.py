"""gpuprov's code that runs on GPU hosts, shipped there by Ansible with the modules that
import it (plugins/modules/). The orchestrator uses the same files: orchestrator/errors.py,
mig.py, mig_apply.py, parsers/_text.py and parsers/mig.py are links to these."""
