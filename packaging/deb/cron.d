# /etc/cron.d/runner, installed by the runner package: cron wakes `runner tick` every minute as
# the `runner` system user, and the database decides what runs. Nothing runs until you uncomment
# the last line. Before that, create the database and your schedules as that user:
#
#   sudo -u runner RUNNER_DB=/var/lib/runner/runner.db runner init
#   sudo -u runner RUNNER_DB=/var/lib/runner/runner.db runner schedule add NAME --cron EXPR -- COMMAND
#   sudo -u runner RUNNER_DB=/var/lib/runner/runner.db runner schedule apply /etc/runner/schedules.toml
#   sudo -u runner RUNNER_DB=/var/lib/runner/runner.db runner doctor     # once enabled
#
# Jobs inherit this environment (cron's is minimal): set PATH here, or use absolute paths in
# job commands. Jobs always run under /bin/sh -c, whatever SHELL says.
SHELL=/bin/sh
PATH=/usr/local/bin:/usr/bin:/bin
RUNNER_DB=/var/lib/runner/runner.db
# Cron mails any output: runner prints one line per run that went dead and per runner error.
MAILTO=root

# (`test -x` keeps cron quiet when the package was removed but this file was kept.)
# m h dom mon dow  user    command
# *   * *   *   *    runner  test -x /usr/bin/runner && /usr/bin/runner tick
