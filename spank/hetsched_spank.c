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
 *    HETSCHED_STATE_DIR (= <root>/<uid>/<job key>) and
 *    HETSCHED_LEASE_TIMEOUT_S, and creates the state folder as the job's
 *    user if it is missing.
 *  - job prolog (slurmd, as root): creates <root>/<uid> for the job's user
 *    (mode 0700) and, as the user, <root>/<uid>/<job key>. The root is made
 *    by the admin and only root may write it, so no user can make another
 *    user's folder first; a root others may write is refused.
 *
 *  It fails soft: on the nodes every problem is logged and the callback
 *  returns success, so a scheduler-side problem never kills training or
 *  drains a node. List it as `optional` in plugstack.conf.
\*****************************************************************************/

#define _GNU_SOURCE	/* O_PATH */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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
#define HETSCHED_KEY_MAX 65	/* longest job key (64), with its NUL */
/* <root>/<uid>/<key>, with its NUL */
#define HETSCHED_DIR_MAX (HETSCHED_ROOT_MAX + 16 + HETSCHED_KEY_MAX)
/* a message that names the state root up to three times */
#define HETSCHED_ERR_MAX (3 * HETSCHED_ROOT_MAX + 512)
#define HETSCHED_KEY_RULE \
	"1 to 64 letters, digits, . _ - +, not starting with a dot"
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
/*
 * slurmstepd: what slurm_spank_init_post_opt decided for the step, for
 * slurm_spank_user_init. The job key and HETSCHED_STATE_DIR when it was
 * set, else why the state folder is refused ("" when it is not).
 */
static char _key[HETSCHED_KEY_MAX] = "";
static char _state_dir[HETSCHED_DIR_MAX] = "";
static char _refusal[HETSCHED_ERR_MAX] = "";

static int _opt_cb(int val, const char *optarg, int remote);

static struct spank_option _options[] = {
	{ "hetsched-signal", "SIG",
	  "slurm-hetsched checkpoint signal: USR2 (default), USR1, "
	  "SIGUSR1, ..., a number 1-64, or none (exported as "
	  "HETSCHED_SIGNAL)",
	  1, OPT_SIGNAL, _opt_cb },
	{ "hetsched-state-dir", "DIR",
	  "slurm-hetsched state root, an absolute path; the job's state "
	  "folder is DIR/<uid>/<job key> (HETSCHED_STATE_ROOT, "
	  "HETSCHED_STATE_DIR)",
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
 * A job key names one folder under <root>/<uid>: 1 to 64 letters, digits
 * and . _ - +, not starting with a dot (so never "." or "..").
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
 * mkdir dirfd/name with mode 0700, whatever the umask. Returns 0 or an
 * errno. Only system calls: it also runs in a forked child. The chmod
 * would follow a link swapped in after the mkdir, but only the owner of
 * dirfd's folder, the user we run as, could swap one in.
 */
static int _mkdir_0700(int dirfd, const char *name)
{
	if (mkdirat(dirfd, name, 0700))
		return errno;
	if (fchmodat(dirfd, name, 0700, 0))
		return errno;
	return 0;
}

/*
 * Create the folder key (mode 0700) as uid/gid under dirfd, the open
 * <root>/<uid>; dir is its path, for messages. When we run as root the
 * mkdir happens in a child that has become the user, so the folder is the
 * user's. An existing folder is never changed; it is only checked.
 */
static void _make_state_dir(int dirfd, const char *dir, const char *key,
			    uid_t uid, gid_t gid)
{
	gid_t groups[HETSCHED_MAX_GROUPS];
	int ngroups = HETSCHED_MAX_GROUPS;
	struct stat st;
	pid_t pid;
	int status = 0, rc;

	if (geteuid() == uid) {
		rc = _mkdir_0700(dirfd, key);
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
				    dir, strerror(errno));
			return;
		}
		if (pid == 0) {
			/* Only system calls from here: we may be a fork of a
			 * threaded process. */
			if (setgroups((size_t) ngroups, groups) ||
			    setgid(gid) || setuid(uid))
				_exit(errno ? errno : EPERM);
			_exit(_mkdir_0700(dirfd, key));
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
			    dir, (unsigned) geteuid(), (unsigned) uid);
		return;
	}

	if (!rc) {
		slurm_info("hetsched: created state folder %s (uid %u, 0700)",
			   dir, (unsigned) uid);
		return;
	}
	if (rc != EEXIST) {
		slurm_error("hetsched: cannot create state folder %s as uid "
			    "%u: %s (the job's wrapper will try again)",
			    dir, (unsigned) uid, strerror(rc));
		return;
	}
	if (fstatat(dirfd, key, &st, AT_SYMLINK_NOFOLLOW)) {
		slurm_error("hetsched: state folder %s: %s", dir,
			    strerror(errno));
	} else if (!S_ISDIR(st.st_mode)) {
		slurm_error("hetsched: %s exists and is not a folder; "
			    "leaving it alone", dir);
	} else if (st.st_uid != uid) {
		slurm_error("hetsched: state folder %s belongs to uid %u, not "
			    "to the job's user %u; leaving it alone",
			    dir, (unsigned) st.st_uid, (unsigned) uid);
	} else if (st.st_mode & 077) {
		slurm_info("hetsched: state folder %s has mode %04o; "
			   "leaving it as the user set it",
			   dir, (unsigned) (st.st_mode & 07777));
	}
}

/*
 * Open the state root without following a link at its end. Refused: one
 * that is not a folder; one that others than its owner may write (they
 * could make another user's <uid> folder before root does, and plant
 * files in it); one that belongs neither to root nor to the user we run
 * as. So it must be root's, except where the plugin itself does not run
 * as root (a test cluster of one user): there that user's root is fine.
 * Returns an O_PATH descriptor (search permission is enough, the root is
 * 0711), -ENOENT if it does not exist, -1 if it is refused or cannot be
 * opened; with a reason in err for both.
 */
static int _open_root(const char *root, char *err, size_t errlen)
{
	struct stat st;
	int fd, rc;

	fd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = errno;
		if (rc == ENOENT) {
			snprintf(err, errlen, "state root %s does not exist",
				 root);
			return -ENOENT;
		}
		if (!lstat(root, &st) && S_ISLNK(st.st_mode))
			snprintf(err, errlen,
				 "state root %s is a symbolic link (give the "
				 "real path)", root);
		else if (rc == ENOTDIR)
			snprintf(err, errlen, "state root %s is not a folder",
				 root);
		else
			snprintf(err, errlen, "cannot open state root %s: %s",
				 root, strerror(rc));
		return -1;
	}
	if (fstat(fd, &st)) {
		snprintf(err, errlen, "state root %s: %s", root,
			 strerror(errno));
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen,
			 "state root %s has mode %04o: other users could make "
			 "a user's folder in it first; make it root's, mode "
			 "0711: chown root: %s; chmod 0711 %s (docs/security.md)",
			 root, (unsigned) (st.st_mode & 07777), root, root);
	} else if (st.st_uid && (st.st_uid != geteuid())) {
		snprintf(err, errlen,
			 "state root %s belongs to uid %u, not to root; make "
			 "it root's, mode 0711: chown root: %s; chmod 0711 %s "
			 "(docs/security.md)",
			 root, (unsigned) st.st_uid, root, root);
	} else {
		return fd;
	}
	close(fd);
	return -1;
}

/*
 * Open <root>/<uid>, the job user's folder, under rootfd without following
 * links. With create (the job prolog, as root) it is made if missing and
 * handed to the user: owner uid:gid, mode 0700. Only root can make entries
 * in the root (_open_root), so a folder of root's found there was made by
 * root (the prolog of another job of this user that has not handed it
 * over yet, the controller, the admin) and is handed over too. Refused:
 * a folder of anyone else (a squat from before the root was locked down),
 * a link, anything that is not a folder.
 * Returns a descriptor (read-only with create, else O_PATH), -ENOENT if it
 * does not exist, -1 if it is refused or on error; with a reason in err
 * for both.
 */
static int _open_user_dir(int rootfd, const char *root, uid_t uid, gid_t gid,
			  int create, char *err, size_t errlen)
{
	char name[16], path[HETSCHED_ROOT_MAX + 16];
	struct stat st;
	int fd, rc, made = 0;

	snprintf(name, sizeof(name), "%u", (unsigned) uid);
	snprintf(path, sizeof(path), "%s/%s", strcmp(root, "/") ? root : "",
		 name);
	if (create) {
		if (!mkdirat(rootfd, name, 0700))
			made = 1;
		else if (errno != EEXIST) {
			snprintf(err, errlen, "cannot create %s: %s", path,
				 strerror(errno));
			return -1;
		}
	}
	fd = openat(rootfd, name, (create ? O_RDONLY : O_PATH) | O_DIRECTORY |
		    O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = errno;
		if (rc == ENOENT) {
			snprintf(err, errlen, "%s does not exist (root makes "
				 "it: the job prolog or the controller)", path);
			return -ENOENT;
		}
		if (!fstatat(rootfd, name, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISLNK(st.st_mode))
			snprintf(err, errlen, "%s is a symbolic link; not "
				 "following it", path);
		else if (rc == ENOTDIR)
			snprintf(err, errlen, "%s is not a folder", path);
		else
			snprintf(err, errlen, "cannot open %s: %s", path,
				 strerror(rc));
		return -1;
	}
	if (fstat(fd, &st)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if ((st.st_uid != uid) && (!create || (st.st_uid != geteuid()))) {
		snprintf(err, errlen, "%s belongs to uid %u, not to the job's "
			 "user %u; not using it", path, (unsigned) st.st_uid,
			 (unsigned) uid);
		close(fd);
		return -1;
	}
	if (made || (st.st_uid != uid)) {
		if (fchown(fd, uid, gid) || fchmod(fd, 0700)) {
			snprintf(err, errlen, "cannot give %s to uid %u: %s",
				 path, (unsigned) uid, strerror(errno));
			close(fd);
			return -1;
		}
		slurm_info("hetsched: %s %s for uid %u (0700)",
			   made ? "created" : "handed over", path,
			   (unsigned) uid);
	}
	return fd;
}

/*
 * Whether the state folder of uid must not be used because the root or
 * <root>/<uid> is refused (_open_root, _open_user_dir). Missing ones are
 * not refused: the wrapper reports them. Returns 1 with the reason in
 * err, else 0 with err empty.
 */
static int _refused(uid_t uid, char *err, size_t errlen)
{
	int rootfd, fd = -ENOENT;

	rootfd = _open_root(_state_root, err, errlen);
	if (rootfd >= 0) {
		fd = _open_user_dir(rootfd, _state_root, uid, 0, 0, err,
				    errlen);
		close(rootfd);
		if (fd >= 0)
			close(fd);
	}
	if ((rootfd == -1) || (fd == -1))
		return 1;
	err[0] = '\0';
	return 0;
}

/*
 * The job key in the remote context: HETSCHED_JOB_KEY of the job's
 * environment, else SLURM_JOB_ID of the job's environment (the leader's id
 * in every component of a heterogeneous job), else the step's own job id.
 * Returns 0, or -1 if no valid key was found.
 */
static int _remote_key(spank_t sp, char *key, size_t keylen)
{
	char value[HETSCHED_ROOT_MAX];
	uint32_t job_id = 0;
	spank_err_t rc;

	/* A buffer longer than a key: a too long one must not pass for
	 * a missing one. */
	rc = spank_getenv(sp, "HETSCHED_JOB_KEY", value, sizeof(value));
	if ((rc == ESPANK_SUCCESS) || (rc == ESPANK_NOSPACE)) {
		if ((rc == ESPANK_SUCCESS) && _valid_key(value)) {
			snprintf(key, keylen, "%.*s", HETSCHED_KEY_MAX - 1,
				 value);
			return 0;
		}
		slurm_error("hetsched: HETSCHED_JOB_KEY '%.*s%s' is not a "
			    "valid job key (" HETSCHED_KEY_RULE "); not "
			    "setting HETSCHED_STATE_DIR",
			    HETSCHED_KEY_MAX - 1, value,
			    (strlen(value) >= HETSCHED_KEY_MAX) ? "..." : "");
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
		slurm_error("hetsched: HETSCHED_JOB_KEY '%.*s%s' is not a "
			    "valid job key (" HETSCHED_KEY_RULE "); not "
			    "creating a state folder",
			    HETSCHED_KEY_MAX - 1, value,
			    (strlen(value) >= HETSCHED_KEY_MAX) ? "..." : "");
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

/* <root>/<uid>/<key>; returns 0, or -1 if it does not fit. */
static int _state_path(char *out, size_t outlen, const char *root, uid_t uid,
		       const char *key)
{
	int n;

	n = snprintf(out, outlen, "%s/%u/%s", strcmp(root, "/") ? root : "",
		     (unsigned) uid, key);
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
	char dir[HETSCHED_DIR_MAX];
	const char *value;
	uid_t uid;

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
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		slurm_error("hetsched: no job uid; not setting "
			    "HETSCHED_STATE_DIR");
		return ESPANK_SUCCESS;
	}
	if (_state_path(dir, sizeof(dir), _state_root, uid, key)) {
		slurm_error("hetsched: state folder path too long");
		return ESPANK_SUCCESS;
	}
	if (_refused(uid, _refusal, sizeof(_refusal))) {
		/* Nor one the job brought along: the plugin's option wins,
		 * as it does when the folder is fine. slurm_spank_user_init
		 * logs why, where the job's stderr shows it too. */
		spank_unsetenv(sp, "HETSCHED_STATE_DIR");
		return ESPANK_SUCCESS;
	}
	snprintf(_key, sizeof(_key), "%s", key);
	snprintf(_state_dir, sizeof(_state_dir), "%s", dir);
	_setenv(sp, "HETSCHED_STATE_DIR", dir);
	return ESPANK_SUCCESS;
}

/*
 * The job prolog cannot see the job's environment: for a key given only
 * there (sbatch --export=ALL,HETSCHED_JOB_KEY=K) it made
 * <root>/<uid>/<job id>. Remove that folder again, under dirfd (the open
 * <root>/<uid>), if it is empty and the user's.
 */
static void _remove_prolog_guess(spank_t sp, int dirfd, uid_t uid)
{
	char job_id[32];
	char guess[HETSCHED_DIR_MAX];
	struct stat st;

	if ((spank_getenv(sp, "SLURM_SPANK_HETSCHED_JOB_KEY", job_id,
			  sizeof(job_id)) != ESPANK_ENV_NOEXIST) ||
	    (spank_getenv(sp, "SLURM_JOB_ID", job_id, sizeof(job_id)) !=
	     ESPANK_SUCCESS) ||
	    !_valid_key(job_id) || !strcmp(job_id, _key))
		return;
	if (fstatat(dirfd, job_id, &st, AT_SYMLINK_NOFOLLOW) ||
	    !S_ISDIR(st.st_mode) || (st.st_uid != uid))
		return;
	if (!unlinkat(dirfd, job_id, AT_REMOVEDIR) &&
	    !_state_path(guess, sizeof(guess), _state_root, uid, job_id))
		slurm_info("hetsched: removed empty %s: the job's key is "
			   "HETSCHED_JOB_KEY from its environment", guess);
}

/*
 * slurmstepd, after it has become the job's user: create the state folder
 * if the prolog did not (e.g. HETSCHED_JOB_KEY came only with --export).
 * Only the last level, and only in a <root>/<uid> of the user's: that one
 * is root's to make. Messages from here also reach the job's stderr, so
 * this is where a refused state folder is reported to the user.
 */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char err[HETSCHED_ERR_MAX];
	struct stat st;
	int rootfd, fd;
	uid_t uid;
	gid_t gid;

	(void) ac;
	(void) av;

	if (_refusal[0]) {
		slurm_error("hetsched: %s; not setting HETSCHED_STATE_DIR",
			    _refusal);
		return ESPANK_SUCCESS;
	}
	if (!_state_dir[0])
		return ESPANK_SUCCESS;
	if ((spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) ||
	    (spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)) {
		slurm_error("hetsched: no job uid/gid; not creating %s",
			    _state_dir);
		return ESPANK_SUCCESS;
	}
	rootfd = _open_root(_state_root, err, sizeof(err));
	if (rootfd < 0) {
		slurm_error("hetsched: %s; not creating %s", err, _state_dir);
		return ESPANK_SUCCESS;
	}
	fd = _open_user_dir(rootfd, _state_root, uid, gid, 0, err,
			    sizeof(err));
	close(rootfd);
	if (fd < 0) {
		slurm_error("hetsched: %s; not creating %s", err, _state_dir);
		return ESPANK_SUCCESS;
	}
	_remove_prolog_guess(sp, fd, uid);
	if (fstatat(fd, _key, &st, AT_SYMLINK_NOFOLLOW))
		_make_state_dir(fd, _state_dir, _key, uid, gid);
	close(fd);
	return ESPANK_SUCCESS;
}

/*
 * Job prolog (slurmd, as root, once per job and node): make <root>/<uid>
 * the job user's, then create the job's state folder in it as the user.
 * Options come from the job control environment, since no option callback
 * runs here.
 */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	char key[HETSCHED_KEY_MAX];
	char dir[HETSCHED_DIR_MAX];
	char err[HETSCHED_ERR_MAX];
	char *value = NULL;
	int rootfd, fd;
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
	if (_prolog_key(sp, key, sizeof(key)))
		return ESPANK_SUCCESS;
	if (_state_path(dir, sizeof(dir), _state_root, uid, key)) {
		slurm_error("hetsched: state folder path too long");
		return ESPANK_SUCCESS;
	}
	rootfd = _open_root(_state_root, err, sizeof(err));
	if (rootfd < 0) {
		slurm_error("hetsched: %s; not creating %s", err, dir);
		return ESPANK_SUCCESS;
	}
	fd = _open_user_dir(rootfd, _state_root, uid, gid, 1, err,
			    sizeof(err));
	close(rootfd);
	if (fd < 0) {
		slurm_error("hetsched: %s; not creating %s", err, dir);
		return ESPANK_SUCCESS;
	}
	_make_state_dir(fd, dir, key, uid, gid);
	close(fd);
	return ESPANK_SUCCESS;
}
