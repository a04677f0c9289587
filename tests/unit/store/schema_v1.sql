-- A round store written by the release at commit 19afcf1 (store schema 1, with job_keys and
-- set_aside): two simulated rounds of three jobs, a done and a pending action, a key binding
-- and a job set aside. Generated once with that release's SqliteStore, dumped with iterdump().
BEGIN TRANSACTION;
CREATE TABLE actions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    round        INTEGER NOT NULL,
    job_key      TEXT NOT NULL,
    slurm_job_id TEXT NOT NULL,
    kind         TEXT NOT NULL,    -- signal, requeue_hold, update, placement, release, ...
    detail       TEXT NOT NULL,    -- JSON: what exactly is done
    status       TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    outcome      TEXT NOT NULL DEFAULT '',
    created_at   REAL NOT NULL,
    finished_at  REAL
);
INSERT INTO "actions" VALUES(1,2,'0','101','release','{}','done','',1700000004.0,1700000005.0);
INSERT INTO "actions" VALUES(2,2,'0','101','signal','{"signal": "USR2", "restart_count": 0}','pending','',1700000006.0,NULL);
CREATE TABLE job_keys (
    key       TEXT PRIMARY KEY,
    uid       INTEGER NOT NULL,
    user      TEXT NOT NULL,
    job_id    TEXT NOT NULL,   -- the job that first used the key
    submit_s  REAL NOT NULL,   -- that job's submit time
    bound_s   REAL NOT NULL,
    ended_s   REAL             -- when its last job left Slurm; NULL while one lives
);
INSERT INTO "job_keys" VALUES('0',1000,'alice','101',5.0,6.0,NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema','1');
CREATE TABLE rounds (
    round       INTEGER PRIMARY KEY,
    written_at  REAL NOT NULL,     -- Unix seconds of the last write
    now_s       REAL NOT NULL,     -- the round's time on the controller's clock
    policy      TEXT NOT NULL,
    recomputed  INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('planned', 'enacted')),
    record      TEXT NOT NULL      -- store/codec.py JSON of the RoundRecord
);
INSERT INTO "rounds" VALUES(1,1700000001.0,0.0,'max_min_fairness_perf',1,'enacted','{"round": 1, "now_s": 0.0, "allocation": {"job_ids": ["0", "1", "2"], "gpu_types": ["k80", "v100"], "x": [[0.37008941645762516, 0.6299105835423748], [0.368382666912357, 0.6316173330876431], [0.2615279166300184, 0.738472083369982]], "objective": 1.1614688688026338, "solve_s": 0.0002789497375488281, "policy": "max_min_fairness_perf", "status": "optimal", "solves": 1, "unmet_slos": null, "placements": null}, "recomputed": true, "capacity": {"k80": 2.0, "v100": 2.0}, "plan": {"round": 1, "keep": {}, "move": {}, "start": {"0": [["n2", "k80", 1]], "1": [["n1", "v100", 1]], "2": [["n1", "v100", 1]]}, "stop": [], "priority": {"0": 1.1102682493728755, "1": 1.8948519992629294, "2": 2.2154162501099464}, "reset": true, "set_aside": {}}, "state": {"round": 1, "job_ids": ["0", "1", "2"], "gpu_types": ["k80", "v100"], "received_s": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], "deficit_s": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], "allocation": {"job_ids": ["0", "1", "2"], "gpu_types": ["k80", "v100"], "x": [[0.37008941645762516, 0.6299105835423748], [0.368382666912357, 0.6316173330876431], [0.2615279166300184, 0.738472083369982]], "objective": 1.1614688688026338, "solve_s": 0.0002789497375488281, "policy": "max_min_fairness_perf", "status": "optimal", "solves": 1, "unmet_slos": null, "placements": null}, "placements": {"0": [["n2", "k80", 1]], "1": [["n1", "v100", 1]], "2": [["n1", "v100", 1]]}, "last_reset_s": 0.0, "reset_pending": false}, "report": {"failed": {}}, "snapshot": {"now_s": 0.0, "nodes": [{"name": "n1", "gpus": {"v100": 2}, "gpus_in_use": {}, "features": [], "available": true}, {"name": "n2", "gpus": {"k80": 2}, "gpus_in_use": {}, "features": [], "available": true}], "jobs": [{"key": "0", "job_class": "LM (batch size 5)", "num_gpus": 1, "steps_remaining": 2438691.0, "total_steps": 2438691.0, "weight": 1.0, "account": "", "user": "", "arrival_s": 0.0, "due_s": null, "tardiness_weight": 0.0, "slo_s": null, "slurm_job_ids": [], "allowed_gpus": [], "measured_steps_per_s": {}}, {"key": "1", "job_class": "ResNet-18 (batch size 32)", "num_gpus": 1, "steps_remaining": 5163602.0, "total_steps": 5163602.0, "weight": 1.0, "account": "", "user": "", "arrival_s": 0.0, "due_s": null, "tardiness_weight": 0.0, "slo_s": null, "slurm_job_ids": [], "allowed_gpus": [], "measured_steps_per_s": {}}, {"key": "2", "job_class": "Transformer (batch size 16)", "num_gpus": 1, "steps_remaining": 62914.0, "total_steps": 62914.0, "weight": 1.0, "account": "", "user": "", "arrival_s": 0.0, "due_s": null, "tardiness_weight": 0.0, "slo_s": null, "slurm_job_ids": [], "allowed_gpus": [], "measured_steps_per_s": {}}]}, "ran_s": {}}');
INSERT INTO "rounds" VALUES(2,1700000003.0,360.0,'max_min_fairness_perf',0,'enacted','{"round": 2, "now_s": 360.0, "allocation": {"job_ids": ["0", "1", "2"], "gpu_types": ["k80", "v100"], "x": [[0.37008941645762516, 0.6299105835423748], [0.368382666912357, 0.6316173330876431], [0.2615279166300184, 0.738472083369982]], "objective": 1.1614688688026338, "solve_s": 0.0002789497375488281, "policy": "max_min_fairness_perf", "status": "optimal", "solves": 1, "unmet_slos": null, "placements": null}, "recomputed": false, "capacity": {"k80": 2.0, "v100": 2.0}, "plan": {"round": 2, "keep": {"2": [["n1", "v100", 1]]}, "move": {"0": [["n1", "v100", 1]], "1": [["n2", "k80", 1]]}, "start": {}, "stop": [], "priority": {"0": 4.4093740847966245, "1": 1.8419133345617849, "2": 1.7231015278632915}, "reset": false, "set_aside": {}}, "state": {"round": 2, "job_ids": ["0", "1", "2"], "gpu_types": ["k80", "v100"], "received_s": [[360.0, 0.0], [0.0, 360.0], [0.0, 360.0]], "deficit_s": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], "allocation": {"job_ids": ["0", "1", "2"], "gpu_types": ["k80", "v100"], "x": [[0.37008941645762516, 0.6299105835423748], [0.368382666912357, 0.6316173330876431], [0.2615279166300184, 0.738472083369982]], "objective": 1.1614688688026338, "solve_s": 0.0002789497375488281, "policy": "max_min_fairness_perf", "status": "optimal", "solves": 1, "unmet_slos": null, "placements": null}, "placements": {"0": [["n1", "v100", 1]], "1": [["n2", "k80", 1]], "2": [["n1", "v100", 1]]}, "last_reset_s": 0.0, "reset_pending": false}, "report": {"failed": {}}, "snapshot": {"now_s": 360.0, "nodes": [{"name": "n1", "gpus": {"v100": 2}, "gpus_in_use": {}, "features": [], "available": true}, {"name": "n2", "gpus": {"k80": 2}, "gpus_in_use": {}, "features": [], "available": true}], "jobs": [{"key": "0", "job_class": "LM (batch size 5)", "num_gpus": 1, "steps_remaining": 2429516.2195402184, "total_steps": 2438691.0, "weight": 1.0, "account": "", "user": "", "arrival_s": 0.0, "due_s": null, "tardiness_weight": 0.0, "slo_s": null, "slurm_job_ids": [], "allowed_gpus": [], "measured_steps_per_s": {}}, {"key": "1", "job_class": "ResNet-18 (batch size 32)", "num_gpus": 1, "steps_remaining": 5152821.023354816, "total_steps": 5163602.0, "weight": 1.0, "account": "", "user": "", "arrival_s": 0.0, "due_s": null, "tardiness_weight": 0.0, "slo_s": null, "slurm_job_ids": [], "allowed_gpus": [], "measured_steps_per_s": {}}, {"key": "2", "job_class": "Transformer (batch size 16)", "num_gpus": 1, "steps_remaining": 58930.92860331854, "total_steps": 62914.0, "weight": 1.0, "account": "", "user": "", "arrival_s": 0.0, "due_s": null, "tardiness_weight": 0.0, "slo_s": null, "slurm_job_ids": [], "allowed_gpus": [], "measured_steps_per_s": {}}]}, "ran_s": {"0": 360.0, "1": 360.0, "2": 360.0}}');
CREATE TABLE set_aside (
    job       TEXT PRIMARY KEY,  -- the job's identity (key, or key#copy)
    comment   TEXT NOT NULL,
    reason    TEXT NOT NULL,
    round     INTEGER NOT NULL
);
INSERT INTO "set_aside" VALUES('k#1','hetsched:class=x','why',1);
CREATE INDEX actions_by_status ON actions (status);
CREATE INDEX actions_by_job ON actions (job_key);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('actions',2);
COMMIT;
