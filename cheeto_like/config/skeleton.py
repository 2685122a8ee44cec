"""The commented starting file ``cheeto config write`` writes."""

SKELETON = """\
# cheeto configuration. Sections mongo, ldap, daemon and api hold one block per
# profile; pick one with --profile/-p or CHEETO_PROFILE (falls back to "default").
# hippo and ucdiam are global. Unknown keys are errors.

mongo:
  default:
    # Leave uri unset to use the embedded store (an nx-27017 server on SQLite files).
    # uri: mongodb://db1.example.org,db2.example.org/?replicaSet=rs0
    database: cheeto
    # user: cheeto
    # password: secret
    # auth_source: admin
    # tls: true
    # tls_ca_file: /etc/ssl/certs/mongo-ca.pem
    embedded:
      # path: ~/.local/share/cheeto/store
      listen: unix            # a socket in path (owner only); tcp for containers
      # host: 127.0.0.1       # tcp only, with a credential: token, $CHEETO_STORE_TOKEN
      # port: 27117           # or token_file (default <path>/store.token)

# slurm:                          # global: every site's Slurm sync
#   max_deletions_per_day: 200    # rolling 24 h removal budget per site (null: none)
#   lease_seconds: 60             # an apply's lease, renewed while it runs
#   root_users: [root]            # users left alone under account root (others: removed)
#   unmanaged_accounts: []        # accounts never touched (other unknown ones: deleted)

# usage:                          # global: usage accounting (ng usage, usage_collect)
#   overlap_minutes: 60           # each collect re-reads this much before the watermark
#   thresholds: [75, 90, 100]     # quota notices (once per threshold per period)
#   currency: USD
#   rates:                        # optional rate card: site -> partition ('*': the rest)
#     farm: {gpu: {cpu_hour: 0.01, gpu_hour: 0.5}, "*": {cpu_hour: 0.01}}

# retention:                      # global: days bookkeeping is kept (null: forever); TTL
#                                 # indexes + the pass (cheeto db prune-retention, task retention)
#   sync_runs_days: 90            # sync runs with their items and steps
#   audit_runs_days: 365          # audits with their findings (keep > 2 audit intervals)
#   quota_notices_days: 400       # counted from the end of the notice's quota period
#   task_results_days: 7          # Celery results (celery_taskmeta), by date_done
#   # history_days: 3650          # History is kept forever unless set

# offboarding:                    # global: what a reap does (ng iam reap, task reap); records
#                                 # only, never data on disk; syncs apply it under their caps
#   program_grace_days: 30        # a programme's members: offboarding at its end, reaped after
#   default: {ssh_keys: keep, memberships: keep, storage: keep, storage_after_days: 30}
#   sites:                        # per site; storage: keep | archive | remove (records expire)
#     farm: {ssh_keys: remove, memberships: remove, storage: remove, storage_after_days: 90}

# metrics:                        # global: Prometheus endpoints (docs/production.md)
#   api: true                     # the API serves GET /metrics at its prefix
#   listen_address: 127.0.0.1     # the worker and beat servers' address
#   hub_worker_port: 9464         # unset: no server (daemon worker --metrics-port N wins)
#   site_worker_ports: {farm: 9465}
#   beat_port: 9466               # (daemon beat --metrics-port N wins)
#   # token: secret               # every /metrics wants Authorization: Bearer <token>
#   #                             # ($CHEETO_METRICS_TOKEN wins)
#   # directory: /var/lib/cheeto/metrics   # parent of the multiprocess directories

# ldap:
#   default:
#     servers: [ldaps://ldap1.example.org, ldaps://ldap2.example.org]  # tried in order
#     searchbase: dc=hpc,dc=example,dc=org
#     user_base: ou=people,dc=hpc,dc=example,dc=org     # default ou=users,<searchbase>
#     # site_base: dc=hpc,dc=example,dc=org             # parent of ou=<site>
#     # groups_ou: groups                                # ou=groups,ou=<site>,…
#     # automount_ou: automount                          # ou=automount,ou=<site>,…
#     login_dn: cn=admin,dc=hpc,dc=example,dc=org
#     password: secret
#     ca_file: /etc/ssl/certs/ldap-ca.pem
#     # use_tls: true                 # StartTLS for ldap:// servers
#     # request_timeout_seconds: 10
#     # connect_timeout_seconds: 5
#     # pool_max_connections: 5
#     # master_map: auto.master
#     # master_entry_format: "{dn}"   # or "ldap:{dn}", "{name}"
#     # master_options: {auto.group: --ghost}
#     # host_suffix: "${HOST_SUFFIX}"
#     # ssh_user_prefix: true         # environment="REMOTE_SSH_USER=<user>" <key>
#     # protected_users: [admin]      # never pruned
#     # max_deletions_per_day: 200    # rolling 24 h removal budget per site (null: none)
#     # lease_seconds: 60             # an applying run's lease, renewed while it runs

# daemon:
#   default:
#     broker_url: amqps://cheeto:secret@broker.example.org:5671//
#     # broker_use_ssl: {ca_file: /etc/ssl/certs/broker-ca.pem, cert_reqs: required}
#     #   (also cert_file, key_file for a client certificate)
#     sites: [farm]                   # the per-site tasks' default site list
#     author: cheeto-daemon           # History/SyncRun author of scheduled runs
#     # timezone: America/Los_Angeles # crontab schedules are read in this zone
#     # beat_schedule_filename: /var/lib/cheeto/celerybeat-schedule
#     # task_time_limit: 3600         # hard limit of one run (soft: a little less)
#     # result_expires: 86400         # celery_taskmeta rows are kept this long
#     # flower_basic_auth: admin:secret   # Flower's login ($FLOWER_BASIC_AUTH wins)
#     tasks:                          # absent, null or enabled: false = disabled
#       # schedule: a number = every N seconds; a string = a 5-field crontab;
#       # no schedule = only when enqueued (cheeto daemon enqueue TASK --site S)
#       slurm_sync:                   # runs on queue slurm.<site> (the site worker)
#         schedule: 600
#         # sites: [farm]             # overrides daemon.sites for this task
#         # apply: true
#         # sudo: false
#         # max_deletions: 50         # null: no cap
#         # timeout_seconds: 60       # each sacctmgr call
#         # sacctmgr: sacctmgr
#       # usage_collect:             # sacct -> usage ledger, on queue slurm.<site>
#       #   schedule: 900
#       #   sacct: sacct
#       #   timeout_seconds: 300
#       #   notify: true              # then the quota notices (needs the mail section)
#       # cluster_monitor:           # stalled jobs, nodes down; on queue slurm.<site>
#       #   schedule: 1800
#       #   pending_over_hours: 24
#       #   down_over_hours: 1
#       # audit:                     # weekly access audit (needs the audit section)
#       #   schedule: "0 6 * * 1"
#       # requests:                  # request_escalate: breaches -> the alerts digest, once
#       #   schedule: 3600
#       # retention:                 # the retention pass (the retention section's days)
#       #   schedule: "30 4 * * *"
#       ldap_sync:
#         schedule: "*/15 * * * *"
#         # full: false
#         # prune: true
#         # force: false
#         # max_deletions: 50
#         # concurrency: 8
#       # sympa:                      # the sympa_export task
#       #   schedule: "0 3 * * *"
#       #   output_dir: /srv/sympa/lists   # writes <output_dir>/<site>.txt
#       #   ignore: [hpc-help@example.org]
#       # puppet_sync:
#       #   schedule: 3600
#       #   repo: /var/lib/cheeto/puppet.hpc    # a clone of the puppet repository
#       #   base_branch: main
#       #   push: true

# api:
#   default:
#     host: 127.0.0.1
#     port: 8000
#     # puppet agents use a managed key (`cheeto ng apikey create --name puppet --scope
#     # puppet:read`, sent as X-API-Key); the static api_key below is deprecated and not
#     # needed to start (32+ characters if set)
#     # api_key: change-me-to-a-random-string-of-32-characters-or-more
#     # prefix: /cheeto          # routes, /healthz and /openapi.json under /cheeto
#     # root_path: /api          # the path a reverse proxy strips before forwarding
#     # tls_cert: /etc/cheeto/tls/api.crt   # both or neither: serve HTTPS
#     # tls_key: /etc/cheeto/tls/api.key
#     # cache_seconds: 30        # exports rebuilt on a change, else at most every 30 s
#     # sign-in and API keys (/api/v1; docs/security.md):
#     # managed_keys_only: true  # accepted for compatibility: keeps --insecure closed
#     # one token key for every API host and `cheeto token issue`: a file copied to each
#     # (default $STATE_DIRECTORY/jwt.key under systemd, else $XDG_STATE_HOME/cheeto/jwt.key)
#     # jwt_key_file: /etc/cheeto/jwt.key
#     # jwt_key: store           # or keep it in the store (readable by whoever reads it)
#     # token_ttl_hours: 8
#     # login_groups: [hpc-staff]  # only members may sign in (default: every user)
#     # failed sign-ins, counted in the store for every API process, per window:
#     # login_max_failures: 5      # one name from one address
#     # login_user_max_failures: 20   # one name from everywhere: then refused only at
#     #                               # addresses with failures for it (never its owner's)
#     # login_address_max_failures: 100   # one address, any names (sprays)
#     # login_window_seconds: 300
#     # trusted_proxies: [10.0.0.5/32]   # believe X-Forwarded-For only from these
#     # max_body_bytes: 1048576    # larger /api/v1 request bodies are a 413
#     # key_rotation_days: 90      # `ng apikey audit` flags older secrets
#     # key_new_grace_days: 7      # a newer key is not yet "never used" in the audits
#     # key_overlap_hours: 24      # a rotated key's old secret keeps working this long

# client:                        # where `cheeto login/me/usage/quota` go ($CHEETO_API_URL wins)
#   url: https://cheeto.example.org:8000
#   # ca_file: /etc/cheeto/tls/ca.pem

# hippo:                         # the HiPPO account-request portal
#   base_url: https://hippo.example.org
#   api_key: change-me            # sent as X-API-Key
#   site_aliases: {caesfarm: farm}   # HiPPO cluster -> site (any case; Site.aliases too)
#   max_tries: 3                  # a failing event is retried this often, then Failed
#   # request_timeout_seconds: 30
#   # retries: 2                  # extra attempts on timeouts, connection errors and 5xx
#   # retry_backoff_seconds: 1    # doubled after each attempt
#   # access_types: {OpenOnDemand: ondemand, SshKey: login-ssh}
#   # notify: true                # e-mail the people an event concerns (see mail:)
#   # sites:                      # per site: grant_slurm (false), replace_ssh_keys (false),
#   #   farm: {grant_slurm: true} #   create_home (true)

# ucdiam:                         # UC Davis IAM: identity facts and offboarding
#   base_url: https://iet-ws.ucdavis.edu/api/iam
#   api_key: change-me
#   # api_key_header: X-API-Key   # the key goes in this header, never in a URL
#   # api_version: "1.0"
#   # grace_days: 1               # missing this long -> offboarding (0: at the first miss)
#   # expiry_offset_days: 30      # offboarding -> deactivated (by the reaper) after this
#   # request_timeout_seconds: 30
#   # retries: 2
#   # refresh: {name: false, email: true, fullname: true}   # fields IAM facts overwrite

# mail:
#   transport: smtp               # or hippo (HiPPO's notify endpoint)
#   from_address: hpc-help@example.org   # default: centre.helpdesk
#   # reply_to: hpc-help@example.org
#   centre:                       # who the notices speak for (defaults: HPC, no links)
#     name: Example Research Computing   # in bodies: "your <name> account"
#     short_name: ERC             # before every subject: "ERC: Account Ready on Farm"
#     helpdesk: hpc-help@example.org     # "for help, write to ..."
#     # docs_url: https://docs.hpc.example.org
#   # templates_dir: /etc/cheeto/notices   # a file named like a built-in template
#   #                             # (account-ready.md.j2, ...) replaces it; subjects.yaml
#   #                             # maps kinds to subjects (docs/guides/admin.md)
#   # enabled: true               # false: record e-mails in History without sending
#   smtp:
#     host: smtp.example.org
#     port: 587
#     starttls: true              # or ssl: true (port 465)
#     # username: cheeto
#     # password: secret
#     # timeout_seconds: 30
#     # ca_file: /etc/ssl/certs/smtp-ca.pem

# alerts:                         # operator digest: failed/refused syncs, failed/stuck tasks
#   to: [hpc-ops@example.org]
#   # subject_prefix: "[cheeto]"
#   # stuck_after_minutes: 120
#   # lookback_hours: 24          # how far the first digest looks back

# requests:                       # the request queue's SLA calendar (ng request ...)
#   timezone: America/Los_Angeles
#   # workdays: [mon, tue, wed, thu, fri]
#   # holidays: [2026-12-25]
#   # kinds: {quota: {sla: 2d, operator: true}}   # account, join, access, quota, storage
# audit:                          # weekly access audit digest (ng audit run, audit task)
#   to: [hpc-security@example.org]
#   # webhook_url: https://chat.example.org/hooks/...   # or $CHEETO_AUDIT_WEBHOOK_URL
#   # key_unused_days: 90
"""
