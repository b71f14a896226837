"""round_profile.py with inductor's PDL off for the listed stages only (capture.NO_INDUCTOR_PDL replaced): the
per-stage A/B of `compile_stages(pdl=)`. Session 50 ran it (as commit_pdl_ab.py, then patching the stage name in
`_CompiledOrEager`) with "commit" against PDL everywhere ("") and nowhere (round_profile.py --no-inductor-pdl):
scale/h100_session50.

    python3 scripts/gpu/stage_pdl_ab.py STAGE[,STAGE] | "" [round_profile.py arguments]
"""

import sys

sys.path.insert(0, "scripts/gpu")
import round_profile  # noqa: E402

from weaver.speculative import capture  # noqa: E402

capture.NO_INDUCTOR_PDL = frozenset(s for s in sys.argv.pop(1).split(",") if s)
print(f"inductor PDL off for stages {sorted(capture.NO_INDUCTOR_PDL)}", flush=True)
raise SystemExit(round_profile.main())
