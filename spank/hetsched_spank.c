/*****************************************************************************\
 *  hetsched_spank.c - SPANK plugin of slurm-hetsched
 *****************************************************************************
 *  Copyright (c) The slurm-hetsched authors.
 *
 *  Permission is hereby granted, free of charge, to any person obtaining a
 *  copy of this software and associated documentation files (the
 *  "Software"), to deal in the Software without restriction, including
 *  without limitation the rights to use, copy, modify, merge, publish,
 *  distribute, sublicense, and/or sell copies of the Software, and to permit
 *  persons to whom the Software is furnished to do so, subject to the
 *  following conditions:
 *
 *  The above copyright notice and this permission notice shall be included
 *  in all copies or substantial portions of the Software.
 *
 *  THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS
 *  OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
 *  MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN
 *  NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
 *  DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
 *  OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE
 *  USE OR OTHER DEALINGS IN THE SOFTWARE.
 *****************************************************************************
 *  What it does, by context (see docs/spank.md):
 *
 *  - every context (slurm_spank_init): registers --hetsched-signal=SIG,
 *    --hetsched-state-dir=DIR and --hetsched-lease=SECONDS, so they show in
 *    `sbatch --help` and travel with the job. plugstack.conf arguments
 *    signal=, state_root= and lease= give site-wide defaults.
 *  - sbatch/salloc/srun (allocator and local): a malformed value fails the
 *    submission. HETSCHED_JOB_KEY of the submitting environment is passed
 *    to the job prolog through the job control environment.
 *  - slurmstepd (remote): exports HETSCHED_SIGNAL, HETSCHED_STATE_ROOT,
 *    HETSCHED_STATE_DIR (= <root>/<job key>) and HETSCHED_LEASE_TIMEOUT_S,
 *    and creates the state folder as the job's user if it is missing.
 *  - job prolog (slurmd, as root): creates <root>/<job key> owned by the
 *    job's user, mode 0700, if the root exists and the user may write it.
 *
 *  It fails soft: on the nodes every problem is logged and the callback
 *  returns success, so a scheduler-side problem never kills training or
 *  drains a node. List it as `optional` in plugstack.conf.
\*****************************************************************************/

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

/*
 * All SPANK plugins must define these symbols for the Slurm plugin loader.
 */
SPANK_PLUGIN(hetsched, 1);

#define HETSCHED_ROOT_MAX 1024	/* longest state root, with its NUL */
#define HETSCHED_KEY_MAX 128	/* longest job key, with its NUL */
#define HETSCHED_LEASE_MAX 604800	/* one week, in seconds */
#define HETSCHED_SIG_MAX 31	/* standard signals; no real-time ones */
#define HETSCHED_MAX_GROUPS 1024

enum {
	OPT_SIGNAL = 1,
	OPT_STATE_DIR,
	OPT_LEASE,
};

/* Canonical values, filled by the option callbacks and plugstack.conf. */
static char _signal[16] = "";
static char _state_root[HETSCHED_ROOT_MAX] = "";
static char _lease[16] = "";
/* Which options the option callback set (index: option val). */
static int _given[OPT_LEASE + 1];

static int _opt_cb(int val, const char *optarg, int remote);

static struct spank_option _options[] = {
	{ "hetsched-signal", "SIG",
	  "slurm-hetsched checkpoint signal: USR2 (default), USR1, "
	  "SIGUSR1, ..., a number 1-64, or none (exported as "
	  "HETSCHED_SIGNAL)",
	  1, OPT_SIGNAL, _opt_cb },
	{ "hetsched-state-dir", "DIR",
	  "slurm-hetsched state root, an absolute path; the job's state "
	  "folder is DIR/<job key> (HETSCHED_STATE_ROOT, HETSCHED_STATE_DIR)",
	  1, OPT_STATE_DIR, _opt_cb },
	{ "hetsched-lease", "SECONDS",
	  "slurm-hetsched: how long a paused job waits for its move before "
	  "it trains on (exported as HETSCHED_LEASE_TIMEOUT_S)",
	  1, OPT_LEASE, _opt_cb },
	SPANK_OPTIONS_TABLE_END
};

static const struct {
	const char *name;
	int num;
} _signals[] = {
	{ "HUP", SIGHUP },	{ "INT", SIGINT },	{ "QUIT", SIGQUIT },
	{ "ILL", SIGILL },	{ "TRAP", SIGTRAP },	{ "ABRT", SIGABRT },
	{ "BUS", SIGBUS },	{ "FPE", SIGFPE },	{ "KILL", SIGKILL },
	{ "USR1", SIGUSR1 },	{ "SEGV", SIGSEGV },	{ "USR2", SIGUSR2 },
	{ "PIPE", SIGPIPE },	{ "ALRM", SIGALRM },	{ "TERM", SIGTERM },
	{ "CHLD", SIGCHLD },	{ "CONT", SIGCONT },	{ "STOP", SIGSTOP },
	{ "TSTP", SIGTSTP },	{ "TTIN", SIGTTIN },	{ "TTOU", SIGTTOU },
	{ "URG", SIGURG },	{ "XCPU", SIGXCPU },	{ "XFSZ", SIGXFSZ },
	{ "VTALRM", SIGVTALRM },	{ "PROF", SIGPROF },
	{ "WINCH", SIGWINCH },	{ "IO", SIGIO },	{ "SYS", SIGSYS },
};

/*
 * Parse a signal name (USR2, SIGUSR2, usr2) or number (1-31) into its
 * canonical spelling: the name without "SIG" where there is one, else the
 * number; "none" (the wrapper then ignores signals) stays "none". Refused:
 * KILL and STOP (cannot be caught), TERM (the wrapper's "stop now" while
 * paused) and real-time signals (the wrapper takes standard ones only).
 * Returns 0, or -1 with a reason in err.
 */
static int _parse_signal(const char *text, char *out, size_t outlen,
			 char *err, size_t errlen)
{
	const char *name = text;
	size_t i;
	int num = -1;

	if (!text || !text[0]) {
		snprintf(err, errlen, "a signal is required, e.g. USR2");
		return -1;
	}
	if (!strcasecmp(text, "none")) {
		snprintf(out, outlen, "none");
		return 0;
	}
	if (isdigit((unsigned char) text[0])) {
		char *end = NULL;
		long value;

		errno = 0;
		value = strtol(text, &end, 10);
		if (errno || *end || (value < 1) ||
		    (value > HETSCHED_SIG_MAX)) {
			snprintf(err, errlen,
				 "signal number '%.32s' is not in 1-%d",
				 text, HETSCHED_SIG_MAX);
			return -1;
		}
		num = (int) value;
	} else {
		if (!strncasecmp(name, "SIG", 3))
			name += 3;
		for (i = 0; i < sizeof(_signals) / sizeof(_signals[0]); i++) {
			if (!strcasecmp(name, _signals[i].name)) {
				num = _signals[i].num;
				break;
			}
		}
		if (num < 0) {
			snprintf(err, errlen,
				 "unknown signal '%.32s' (use a name such as "
				 "USR2 or SIGUSR1, a number 1-%d, or none)",
				 text, HETSCHED_SIG_MAX);
			return -1;
		}
	}
	if ((num == SIGKILL) || (num == SIGSTOP)) {
		snprintf(err, errlen,
			 "signal '%.32s' cannot be caught, so no checkpoint "
			 "could be written (use USR2 or USR1)", text);
		return -1;
	}
	if (num == SIGTERM) {
		snprintf(err, errlen,
			 "signal '%.32s' cannot be the checkpoint signal: "
			 "SIGTERM ends a paused job (use USR2 or USR1)", text);
		return -1;
	}
	for (i = 0; i < sizeof(_signals) / sizeof(_signals[0]); i++) {
		if (_signals[i].num == num) {
			snprintf(out, outlen, "%s", _signals[i].name);
			return 0;
		}
	}
	snprintf(out, outlen, "%d", num);
	return 0;
}

/*
 * Check a state root: absolute, printable, short enough to leave room for
 * a job key. Trailing slashes are dropped ("/" stays "/").
 * Returns 0, or -1 with a reason in err.
 */
static int _parse_root(const char *text, char *out, size_t outlen,
		       char *err, size_t errlen)
{
	size_t len, i;

	if (!text || (text[0] != '/')) {
		snprintf(err, errlen,
			 "state dir '%.64s' is not an absolute path (it must "
			 "start with /)", text ? text : "");
		return -1;
	}
	len = strlen(text);
	if (len >= outlen) {
		snprintf(err, errlen,
			 "state dir is too long (%zu characters, at most %zu)",
			 len, outlen - 1);
		return -1;
	}
	for (i = 0; i < len; i++) {
		if (iscntrl((unsigned char) text[i])) {
			snprintf(err, errlen,
				 "state dir contains a control character");
			return -1;
		}
	}
	while ((len > 1) && (text[len - 1] == '/'))
		len--;
	snprintf(out, outlen, "%.*s", (int) len, text);
	return 0;
}

/* Lease: whole seconds, 1 to one week. Returns 0, or -1 with a reason. */
static int _parse_lease(const char *text, char *out, size_t outlen,
			char *err, size_t errlen)
{
	char *end = NULL;
	long value;

	errno = 0;
	value = (text && isdigit((unsigned char) text[0])) ?
		strtol(text, &end, 10) : -1;
	if ((value < 1) || errno || !end || *end ||
	    (value > HETSCHED_LEASE_MAX)) {
		snprintf(err, errlen,
			 "lease '%.32s' is not a whole number of seconds in "
			 "1-%d", text ? text : "", HETSCHED_LEASE_MAX);
		return -1;
	}
	snprintf(out, outlen, "%ld", value);
	return 0;
}

/* Validate and store one value. Returns 0, or -1 with a reason in err. */
static int _set_value(int val, const char *text, char *err, size_t errlen)
{
	switch (val) {
	case OPT_SIGNAL:
		return _parse_signal(text, _signal, sizeof(_signal), err,
				     errlen);
	case OPT_STATE_DIR:
		return _parse_root(text, _state_root, sizeof(_state_root),
				   err, errlen);
	case OPT_LEASE:
		return _parse_lease(text, _lease, sizeof(_lease), err, errlen);
	default:
		snprintf(err, errlen, "unknown option %d", val);
		return -1;
	}
}

static struct spank_option *_option(int val)
{
	size_t i;

	for (i = 0; _options[i].name; i++) {
		if (_options[i].val == val)
			return &_options[i];
	}
	return NULL;
}

static const char *_opt_name(int val)
{
	struct spank_option *opt = _option(val);

	return opt ? opt->name : "?";
}

/*
 * Option callback: runs in sbatch/srun/salloc when the user gives the
 * option, and again in slurmstepd with the value that travelled with the
 * job. On the submitting side an error fails the submission; in slurmstepd
 * it is only logged, and the value is ignored.
 */
static int _opt_cb(int val, const char *optarg, int remote)
{
	char err[256];

	if (_set_value(val, optarg, err, sizeof(err)) == 0) {
		_given[val] = 1;
		return ESPANK_SUCCESS;
	}
	if (remote) {
		slurm_error("hetsched: ignoring --%s: %s", _opt_name(val), err);
		return ESPANK_SUCCESS;
	}
	slurm_error("hetsched: --%s: %s", _opt_name(val), err);
	return ESPANK_BAD_ARG;
}

/*
 * plugstack.conf arguments (signal=USR2 state_root=/shared/hetsched
 * lease=600) are site defaults; options given at submission override them.
 * A bad argument is logged and ignored.
 */
static void _parse_args(int ac, char **av)
{
	static const struct {
		const char *prefix;
		int val;
	} keys[] = {
		{ "signal=", OPT_SIGNAL },
		{ "state_root=", OPT_STATE_DIR },
		{ "lease=", OPT_LEASE },
	};
	char err[256];
	int i;
	size_t k;

	for (i = 0; i < ac; i++) {
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			size_t len = strlen(keys[k].prefix);

			if (strncmp(av[i], keys[k].prefix, len))
				continue;
			if (_set_value(keys[k].val, av[i] + len, err,
				       sizeof(err)))
				slurm_error("hetsched: plugstack.conf: "
					    "ignoring %s: %s", av[i], err);
			break;
		}
		if (k == sizeof(keys) / sizeof(keys[0]))
			slurm_error("hetsched: plugstack.conf: unknown "
				    "argument '%s' (known: signal=, "
				    "state_root=, lease=)", av[i]);
	}
}

/*
 * A job key names one folder under the state root: letters, digits and
 * . _ - + only, not starting with a dot (so never "." or "..").
 */
static int _valid_key(const char *key)
{
	size_t i, len = strlen(key);

	if (!len || (len >= HETSCHED_KEY_MAX) || (key[0] == '.'))
		return 0;
	for (i = 0; i < len; i++) {
		if (!isalnum((unsigned char) key[i]) &&
		    !strchr("._-+", key[i]))
			return 0;
	}
	return 1;
}

/*
 * Create path (mode 0700) as uid/gid. When we run as root the mkdir
 * happens in a child that has become the user, so the folder is the
 * user's, and a root the user may not write stays untouched. An existing
 * folder is never changed; it is only checked.
 */
static void _make_state_dir(const char *path, uid_t uid, gid_t gid)
{
	gid_t groups[HETSCHED_MAX_GROUPS];
	int ngroups = HETSCHED_MAX_GROUPS;
	struct stat st;
	pid_t pid;
	int status = 0, rc;

	if (geteuid() == uid) {
		rc = mkdir(path, 0700) ? errno : 0;
		if (!rc && chmod(path, 0700))
			rc = errno;
	} else if (geteuid() == 0) {
		struct passwd pw, *result = NULL;
		char buf[4096];

		if (getpwuid_r(uid, &pw, buf, sizeof(buf), &result) ||
		    !result ||
		    (getgrouplist(pw.pw_name, gid, groups, &ngroups) < 0)) {
			/* Unknown user or too many groups: primary only. */
			groups[0] = gid;
			ngroups = 1;
		}
		pid = fork();
		if (pid < 0) {
			slurm_error("hetsched: cannot create %s: fork: %s",
				    path, strerror(errno));
			return;
		}
		if (pid == 0) {
			/* Only system calls from here: we may be a fork of a
			 * threaded process. */
			if (setgroups((size_t) ngroups, groups) ||
			    setgid(gid) || setuid(uid))
				_exit(errno ? errno : EPERM);
			if (mkdir(path, 0700))
				_exit(errno);
			if (chmod(path, 0700))
				_exit(errno);
			_exit(0);
		}
		while ((rc = waitpid(pid, &status, 0)) < 0) {
			if (errno != EINTR)
				break;
		}
		if (rc < 0)
			rc = errno;
		else if (WIFEXITED(status))
			rc = WEXITSTATUS(status);
		else
			rc = ECHILD;
	} else {
		slurm_error("hetsched: not creating %s: running as uid %u, "
			    "not as the job's user %u or root",
			    path, (unsigned) geteuid(), (unsigned) uid);
		return;
	}

	if (!rc) {
		slurm_info("hetsched: created state folder %s (uid %u, 0700)",
			   path, (unsigned) uid);
		return;
	}
	if (rc != EEXIST) {
		slurm_error("hetsched: cannot create state folder %s as uid "
			    "%u: %s (the job's wrapper will try again)",
			    path, (unsigned) uid, strerror(rc));
		return;
	}
	if (lstat(path, &st)) {
		slurm_error("hetsched: state folder %s: %s", path,
			    strerror(errno));
	} else if (!S_ISDIR(st.st_mode)) {
		slurm_error("hetsched: %s exists and is not a folder; "
			    "leaving it alone", path);
	} else if (st.st_uid != uid) {
		slurm_error("hetsched: state folder %s belongs to uid %u, not "
			    "to the job's user %u; leaving it alone",
			    path, (unsigned) st.st_uid, (unsigned) uid);
	} else if (st.st_mode & 077) {
		slurm_info("hetsched: state folder %s has mode %04o; "
			   "leaving it as the user set it",
			   path, (unsigned) (st.st_mode & 07777));
	}
}

/*
 * The job key in the remote context: HETSCHED_JOB_KEY of the job's
 * environment, else SLURM_JOB_ID of the job's environment (the leader's id
 * in every component of a heterogeneous job), else the step's own job id.
 * Returns 0, or -1 if no valid key was found.
 */
static int _remote_key(spank_t sp, char *key, size_t keylen)
{
	uint32_t job_id = 0;

	if (spank_getenv(sp, "HETSCHED_JOB_KEY", key, (int) keylen) ==
	    ESPANK_SUCCESS) {
		if (_valid_key(key))
			return 0;
		slurm_error("hetsched: HETSCHED_JOB_KEY '%.*s' is not a valid "
			    "job key (letters, digits, . _ - +); not "
			    "setting HETSCHED_STATE_DIR",
			    HETSCHED_KEY_MAX, key);
		return -1;
	}
	if ((spank_getenv(sp, "SLURM_JOB_ID", key, (int) keylen) ==
	     ESPANK_SUCCESS) && _valid_key(key))
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("hetsched: no job id; not setting "
			    "HETSCHED_STATE_DIR");
		return -1;
	}
	snprintf(key, keylen, "%u", job_id);
	return 0;
}

/*
 * The job key in the job prolog, which cannot see the job's environment:
 * HETSCHED_JOB_KEY as the submitting command saw it (passed on as
 * SPANK_HETSCHED_JOB_KEY), else the heterogeneous job's leader id, else
 * the job id.
 */
static int _prolog_key(spank_t sp, char *key, size_t keylen)
{
	const char *value;
	uint32_t job_id = 0;

	value = getenv("SPANK_HETSCHED_JOB_KEY");
	if (value) {
		if (_valid_key(value)) {
			snprintf(key, keylen, "%s", value);
			return 0;
		}
		slurm_error("hetsched: HETSCHED_JOB_KEY '%.*s' is not a valid "
			    "job key; not creating a state folder",
			    HETSCHED_KEY_MAX, value);
		return -1;
	}
	value = getenv("SLURM_HET_JOB_ID");
	if (value && _valid_key(value)) {
		snprintf(key, keylen, "%s", value);
		return 0;
	}
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("hetsched: no job id in the job prolog");
		return -1;
	}
	snprintf(key, keylen, "%u", job_id);
	return 0;
}

/* Join root and key; returns 0, or -1 if it does not fit. */
static int _join(char *out, size_t outlen, const char *root, const char *key)
{
	int n;

	if (!strcmp(root, "/"))
		n = snprintf(out, outlen, "/%s", key);
	else
		n = snprintf(out, outlen, "%s/%s", root, key);
	return ((n < 0) || ((size_t) n >= outlen)) ? -1 : 0;
}

static void _setenv(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_setenv(sp, name, value, 1);

	if (rc != ESPANK_SUCCESS)
		slurm_error("hetsched: cannot set %s: %s", name,
			    spank_strerror(rc));
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	int i;

	_parse_args(ac, av);

	/* Options exist only where a job is submitted or started. */
	if ((ctx != S_CTX_LOCAL) && (ctx != S_CTX_REMOTE) &&
	    (ctx != S_CTX_ALLOCATOR))
		return ESPANK_SUCCESS;
	for (i = 0; _options[i].name; i++) {
		spank_err_t rc = spank_option_register(sp, &_options[i]);

		if (rc != ESPANK_SUCCESS)
			slurm_error("hetsched: cannot register --%s: %s",
				    _options[i].name, spank_strerror(rc));
	}
	/* Never fail here: in slurmstepd that would fail the job. */
	return ESPANK_SUCCESS;
}

/*
 * Options reach slurmstepd through the job's environment. With a restricted
 * `sbatch --export=VAR,...` only Slurm's copy of them arrives, named
 * SLURM_SPANK__SLURM_SPANK_OPTION_hetsched_<option with _ for ->, and the
 * option callback does not run: read the values from there instead.
 */
static void _options_from_job_env(spank_t sp)
{
	char name[128], value[HETSCHED_ROOT_MAX], err[256];
	size_t i, j;

	for (i = 0; _options[i].name; i++) {
		int val = _options[i].val;
		int len;

		if (_given[val])
			continue;
		len = snprintf(name, sizeof(name),
			       "SLURM_SPANK__SLURM_SPANK_OPTION_hetsched_%s",
			       _options[i].name);
		if ((len < 0) || ((size_t) len >= sizeof(name)))
			continue;
		for (j = 0; name[j]; j++) {
			if (name[j] == '-')
				name[j] = '_';
		}
		if (spank_getenv(sp, name, value, sizeof(value)) !=
		    ESPANK_SUCCESS)
			continue;
		if (_set_value(val, value, err, sizeof(err)))
			slurm_error("hetsched: ignoring --%s: %s",
				    _options[i].name, err);
		else
			_given[val] = 1;
	}
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	char key[HETSCHED_KEY_MAX];
	char dir[HETSCHED_ROOT_MAX + HETSCHED_KEY_MAX];
	const char *value;

	(void) ac;
	(void) av;

	if (!spank_remote(sp)) {
		/* sbatch/salloc/srun: let the job prolog know the key. */
		value = getenv("HETSCHED_JOB_KEY");
		if (value && value[0])
			spank_job_control_setenv(sp, "HETSCHED_JOB_KEY", value,
						 1);
		return ESPANK_SUCCESS;
	}

	_options_from_job_env(sp);
	if (_signal[0])
		_setenv(sp, "HETSCHED_SIGNAL", _signal);
	if (_lease[0])
		_setenv(sp, "HETSCHED_LEASE_TIMEOUT_S", _lease);
	if (!_state_root[0])
		return ESPANK_SUCCESS;
	_setenv(sp, "HETSCHED_STATE_ROOT", _state_root);
	if (_remote_key(sp, key, sizeof(key)))
		return ESPANK_SUCCESS;
	if (_join(dir, sizeof(dir), _state_root, key)) {
		slurm_error("hetsched: state folder path too long");
		return ESPANK_SUCCESS;
	}
	_setenv(sp, "HETSCHED_STATE_DIR", dir);
	return ESPANK_SUCCESS;
}

/*
 * The job prolog cannot see the job's environment: for a key given only
 * there (sbatch --export=ALL,HETSCHED_JOB_KEY=K) it made <root>/<job id>.
 * Remove that folder again if it is empty and the user's.
 */
static void _remove_prolog_guess(spank_t sp, const char *dir, uid_t uid)
{
	char job_id[32];
	char guess[HETSCHED_ROOT_MAX + HETSCHED_KEY_MAX];
	struct stat st;

	if ((spank_getenv(sp, "SLURM_SPANK_HETSCHED_JOB_KEY", job_id,
			  sizeof(job_id)) != ESPANK_ENV_NOEXIST) ||
	    (spank_getenv(sp, "SLURM_JOB_ID", job_id, sizeof(job_id)) !=
	     ESPANK_SUCCESS) ||
	    !_valid_key(job_id) ||
	    _join(guess, sizeof(guess), _state_root, job_id) ||
	    !strcmp(guess, dir))
		return;
	if (lstat(guess, &st) || !S_ISDIR(st.st_mode) || (st.st_uid != uid))
		return;
	if (!rmdir(guess))
		slurm_info("hetsched: removed empty %s: the job's key is "
			   "HETSCHED_JOB_KEY from its environment", guess);
}

/*
 * slurmstepd, after it has become the job's user: create the state folder
 * if the prolog did not (e.g. HETSCHED_JOB_KEY came only with --export).
 */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char dir[HETSCHED_ROOT_MAX + HETSCHED_KEY_MAX];
	struct stat st;
	uid_t uid;
	gid_t gid;

	(void) ac;
	(void) av;

	if (!_state_root[0] ||
	    (spank_getenv(sp, "HETSCHED_STATE_DIR", dir, sizeof(dir)) !=
	     ESPANK_SUCCESS))
		return ESPANK_SUCCESS;
	if ((spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) ||
	    (spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)) {
		slurm_error("hetsched: no job uid/gid; not creating %s", dir);
		return ESPANK_SUCCESS;
	}
	_remove_prolog_guess(sp, dir, uid);
	if (!stat(dir, &st))
		return ESPANK_SUCCESS;
	if (stat(_state_root, &st) || !S_ISDIR(st.st_mode)) {
		slurm_error("hetsched: state root %s is not a folder; not "
			    "creating %s", _state_root, dir);
		return ESPANK_SUCCESS;
	}
	_make_state_dir(dir, uid, gid);
	return ESPANK_SUCCESS;
}

/*
 * Job prolog (slurmd, as root, once per job and node): create the job's
 * state folder owned by the job's user. Options come from the job control
 * environment, since no option callback runs here.
 */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	char key[HETSCHED_KEY_MAX];
	char dir[HETSCHED_ROOT_MAX + HETSCHED_KEY_MAX];
	char err[256];
	char *value = NULL;
	struct stat st;
	uid_t uid;
	gid_t gid;

	(void) ac;
	(void) av;

	if ((spank_option_getopt(sp, _option(OPT_STATE_DIR), &value) ==
	     ESPANK_SUCCESS) && value &&
	    _parse_root(value, _state_root, sizeof(_state_root), err,
			sizeof(err)))
		slurm_error("hetsched: ignoring --hetsched-state-dir: %s",
			    err);
	if (!_state_root[0])
		return ESPANK_SUCCESS;
	if ((spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) ||
	    (spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)) {
		slurm_error("hetsched: no job uid/gid in the job prolog");
		return ESPANK_SUCCESS;
	}
	if (stat(_state_root, &st) || !S_ISDIR(st.st_mode)) {
		slurm_error("hetsched: state root %s is not an existing "
			    "folder; not creating the job's state folder",
			    _state_root);
		return ESPANK_SUCCESS;
	}
	if (_prolog_key(sp, key, sizeof(key)))
		return ESPANK_SUCCESS;
	if (_join(dir, sizeof(dir), _state_root, key)) {
		slurm_error("hetsched: state folder path too long");
		return ESPANK_SUCCESS;
	}
	_make_state_dir(dir, uid, gid);
	return ESPANK_SUCCESS;
}
