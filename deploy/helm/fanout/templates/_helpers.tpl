{{/* Names. */}}
{{- define "fanout.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fanout.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object; selectorLabels identify the release's pods
(they never carry the chart's version: a Deployment's selector is
immutable). */}}
{{- define "fanout.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fanout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fanout.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fanout.labels" -}}
{{ include "fanout.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: fanout
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "fanout.chart" . }}
{{- end }}

{{/* The ServiceAccount of the pods, and of the setup hook. */}}
{{- define "fanout.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fanout.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fanout.setupServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- printf "%s-setup" (include "fanout.serviceAccountName" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "fanout.serviceAccountName" . }}
{{- end }}
{{- end }}

{{/* The image, by digest when one is set; the zero digest of the defaults
is a placeholder, refused. */}}
{{- define "fanout.image" -}}
{{- $zero := printf "sha256:%s" (repeat 64 "0") }}
{{- if eq .Values.image.digest $zero }}
{{- fail "image.digest is the all-zero placeholder: set image.digest to your image's digest (sha256:..., what docker buildx build --push printed), or set image.digest to \"\" and image.tag" }}
{{- else if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else if .Values.image.tag }}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- else }}
{{- fail "image: set image.digest (preferred) or image.tag" }}
{{- end }}
{{- end }}

{{/* A worker pool's component label and task queue, from its queue name. */}}
{{- define "fanout.workerComponent" -}}
{{- if eq . "events" }}worker-events{{ else }}worker-delivery-{{ . }}{{ end }}
{{- end }}

{{- define "fanout.taskQueue" -}}
{{- if eq . "events" }}fanout-events{{ else }}fanout-delivery-{{ . }}{{ end }}
{{- end }}

{{/* Every task queue a worker pool serves, space-separated: high's and
normal's pools serve their delivery queue and its large-batch queue, low's
its one queue (vocab.TaskQueues). */}}
{{- define "fanout.taskQueues" -}}
{{- if eq . "events" }}fanout-events{{ else if eq . "low" }}fanout-delivery-low{{ else }}fanout-delivery-{{ . }} fanout-delivery-{{ . }}-large{{ end }}
{{- end }}

{{/* The path of a key of the mounted Secret. */}}
{{- define "fanout.secretFile" -}}
{{- printf "%s/%s" (trimSuffix "/" .root.Values.secretMountPath) .key }}
{{- end }}

{{/* Ports (strings) derived from the configuration, for the NetworkPolicies. */}}
{{- define "fanout.temporalPort" -}}
{{- $parts := splitList ":" .Values.temporal.address }}
{{- if lt (len $parts) 2 }}{{ fail "temporal.address: want host:port" }}{{ end }}
{{- last $parts }}
{{- end }}

{{- define "fanout.kafkaPorts" -}}
{{- $ports := list }}
{{- range .Values.kafka.brokers }}
{{- $parts := splitList ":" . }}
{{- if lt (len $parts) 2 }}{{ fail (printf "kafka.brokers: %q: want host:port" .) }}{{ end }}
{{- $ports = append $ports (last $parts) }}
{{- end }}
{{- $ports | uniq | join "," }}
{{- end }}

{{- define "fanout.redisPorts" -}}
{{- $ports := list }}
{{- range splitList "," .Values.redis.url }}
{{- $u := urlParse (trim .) }}
{{- $parts := splitList ":" $u.host }}
{{- if gt (len $parts) 1 }}
{{- $ports = append $ports (last $parts) }}
{{- else }}
{{- $ports = append $ports "6379" }}
{{- end }}
{{- end }}
{{- $ports | uniq | join "," }}
{{- end }}

{{- define "fanout.recipientsPort" -}}
{{- with .Values.webhook.recipientsURL }}
{{- $u := urlParse . }}
{{- $parts := splitList ":" $u.host }}
{{- if gt (len $parts) 1 }}{{ last $parts }}{{ else if eq $u.scheme "https" }}443{{ else }}80{{ end }}
{{- end }}
{{- end }}

{{/*
A pool's scheduling and pod extras: the chart-wide defaults (top-level
values) with the pool's own over them. Maps (nodeSelector, podLabels,
podAnnotations) merge, the pool's keys winning; any other key the pool sets,
even empty, replaces the default. Call with dict "root" $ "pool" <the pool's
values>; returns YAML (fromYaml it).
*/}}
{{- define "fanout.poolSettings" -}}
{{- $root := .root }}
{{- $pool := .pool }}
{{- $out := dict }}
{{- range $k := list "nodeSelector" "podLabels" "podAnnotations" }}
{{- $_ := set $out $k (merge (dict) (deepCopy (get $pool $k | default dict)) (deepCopy (get $root.Values $k | default dict))) }}
{{- end }}
{{- range $k := list "tolerations" "affinity" "topologySpreadConstraints" "priorityClassName" "extraVolumes" "extraVolumeMounts" }}
{{- if hasKey $pool $k }}
{{- $_ := set $out $k (get $pool $k) }}
{{- else }}
{{- $_ := set $out $k (get $root.Values $k) }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
The pod template of every workload: labels, annotations, scheduling, the
ServiceAccount, security, the Secret mounted as files and the ConfigMap as
environment. Call with dict
  "root" $                 "component" the app.kubernetes.io/component
  "pool" pool values       "container" the container's name
  "command" list           "env" map (container env over the ConfigMap)
  "resources" map          "probe" bool (liveness on /metrics, metrics port)
and optionally "configMap" (default <fullname>-config; "-": none),
"secretItems" (only these keys of the Secret), "ports" (more container
ports), "probes" (YAML of the container's probes instead of "probe"),
"serviceAccountName", "noSpread" (true: no topologySpreadConstraints),
"restartPolicy", "terminationGracePeriodSeconds", "annotations" (map).
*/}}
{{- define "fanout.podTemplate" -}}
{{- $root := .root }}
{{- $p := include "fanout.poolSettings" (dict "root" $root "pool" .pool) | fromYaml }}
{{- $selector := include "fanout.selectorLabels" $root | fromYaml }}
{{- $_ := set $selector "app.kubernetes.io/component" .component }}
{{- $labels := merge (dict) $selector (deepCopy ($p.podLabels | default dict)) }}
{{- $annotations := merge (dict) (deepCopy (.annotations | default dict)) (deepCopy ($p.podAnnotations | default dict)) }}
{{- $env := merge (dict) (deepCopy (.env | default dict)) (deepCopy (get .pool "extraEnv" | default dict)) }}
{{- $configMap := .configMap | default (printf "%s-config" (include "fanout.fullname" $root)) }}
metadata:
  labels:
    {{- toYaml $labels | nindent 4 }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with .restartPolicy }}
  restartPolicy: {{ . }}
  {{- end }}
  {{- with .terminationGracePeriodSeconds }}
  terminationGracePeriodSeconds: {{ . }}
  {{- end }}
  serviceAccountName: {{ .serviceAccountName | default (include "fanout.serviceAccountName" $root) }}
  # fanout never calls the Kubernetes API.
  automountServiceAccountToken: false
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $p.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if and (not .noSpread) $p.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- range $p.topologySpreadConstraints }}
    {{- $c := deepCopy . }}
    {{- if not (hasKey $c "labelSelector") }}
    {{- $_ := set $c "labelSelector" (dict "matchLabels" $selector) }}
    {{- end }}
    {{- toYaml (list $c) | nindent 4 }}
    {{- end }}
  {{- end }}
  containers:
    - name: {{ .container }}
      image: {{ include "fanout.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      command:
        {{- toYaml .command | nindent 8 }}
      {{- if ne $configMap "-" }}
      envFrom:
        - configMapRef:
            name: {{ $configMap }}
      {{- end }}
      {{- with $env }}
      env:
        {{- range $k, $v := . }}
        - name: {{ $k }}
          value: {{ $v | toString | quote }}
        {{- end }}
      {{- end }}
      {{- if .probe }}
      ports:
        - name: metrics
          containerPort: {{ $root.Values.metricsPort }}
          protocol: TCP
      livenessProbe:
        httpGet:
          path: /metrics
          port: metrics
        {{- toYaml $root.Values.livenessProbe | nindent 8 }}
      {{- else if .ports }}
      ports:
        {{- toYaml .ports | nindent 8 }}
      {{- end }}
      {{- with .probes }}
      {{- . | nindent 6 }}
      {{- end }}
      resources:
        {{- toYaml .resources | nindent 8 }}
      {{- with $root.Values.containerSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # Secrets are files (the *_FILE variables name them), never
      # environment variables: they stay out of the pod spec and rotate in
      # place.
      volumeMounts:
        - name: secrets
          mountPath: {{ $root.Values.secretMountPath }}
          readOnly: true
        {{- with $p.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: secrets
      secret:
        secretName: {{ required "existingSecret: name the Secret you created" $root.Values.existingSecret }}
        defaultMode: 0440
        {{- with .secretItems }}
        items:
          {{- range . }}
          - {key: {{ . }}, path: {{ . }}}
          {{- end }}
        {{- end }}
    {{- with $p.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
