# The build of the HTTP functions (enqueue, claim, ack, admin): their app.py and a stamp.
#
# `sam build` (BuildMethod: makefile) runs, for each of them:
#     make --makefile <repo>/functions/<name>/Makefile build-<LogicalId>
# with ARTIFACTS_DIR set, in a scratch copy of the function's folder (layers/README.md).
#
# Why a stamp: these functions publish a version behind the alias "live" on each deploy
# that changes them (AutoPublishAlias; SnapStart snapshots each version), but their code is
# one line and tierq lives in the layer, whose changes SAM does not count. A stamp of the
# build makes every built function new, so the alias always runs the layer deployed with it.

FUNCTION_MAKEFILE := $(abspath $(firstword $(MAKEFILE_LIST)))
FUNCTION_DIR := $(patsubst %/,%,$(dir $(FUNCTION_MAKEFILE)))
PYTHON ?= python3

.PHONY: build-EnqueueFunction build-ClaimFunction build-AckFunction build-AdminFunction

build-EnqueueFunction build-ClaimFunction build-AckFunction build-AdminFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 1; }
	cp "$(FUNCTION_DIR)/app.py" "$(ARTIFACTS_DIR)/app.py"
	$(PYTHON) -c "import datetime, uuid; print(datetime.datetime.now(datetime.timezone.utc).isoformat(), uuid.uuid4())" > "$(ARTIFACTS_DIR)/build_stamp.txt"
