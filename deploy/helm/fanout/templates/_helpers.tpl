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

{{/* Labels of every object; selectorLabels identify the release's pods. */}}
{{- define "fanout.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fanout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fanout.labels" -}}
{{ include "fanout.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: fanout
{{- end }}

{{/* The image, by digest when one is set. */}}
{{- define "fanout.image" -}}
{{- if .Values.image.digest }}
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
The pod spec shared by every role: security, the Secret mounted as files,
the ConfigMap as environment. Call with dict "root" $ "component" c
"command" list "env" map "resources" map "probe" bool.
*/}}
{{- define "fanout.podSpec" -}}
{{- $root := .root }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
automountServiceAccountToken: false
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: {{ .container }}
    image: {{ include "fanout.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command:
      {{- toYaml .command | nindent 6 }}
    envFrom:
      - configMapRef:
          name: {{ include "fanout.fullname" $root }}-config
    {{- with .env }}
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
      {{- toYaml $root.Values.livenessProbe | nindent 6 }}
    {{- end }}
    resources:
      {{- toYaml .resources | nindent 6 }}
    {{- with $root.Values.containerSecurityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    # Secrets are files (the *_FILE variables of the ConfigMap name them),
    # never environment variables: they stay out of the pod spec and rotate
    # in place.
    volumeMounts:
      - name: secrets
        mountPath: {{ $root.Values.secretMountPath }}
        readOnly: true
volumes:
  - name: secrets
    secret:
      secretName: {{ required "existingSecret: name the Secret you created" $root.Values.existingSecret }}
      defaultMode: 0440
{{- end }}
