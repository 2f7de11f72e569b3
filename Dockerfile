# The sluice gateway as an image:  docker build -t sluice:0.1.0 .
#
# Two stages: `build` installs every dependency (TypeScript is a dev dependency) and compiles the
# scheduler package and the gateway; `runtime` installs the production dependencies only, from the
# same lock file, takes the compiled files and runs as the unprivileged `node` user.
# CI has no Docker: scripts/dockerfile-steps.sh runs these steps as plain commands (test/deploy).
# Keep RUN lines free of absolute paths, so that the script can run them in a scratch directory.

FROM node:20-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
COPY packages/scheduler/package.json packages/scheduler/
# No scripts: `prepare` would build before the sources are here (the next RUN builds).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY packages/scheduler/tsconfig.build.json packages/scheduler/
COPY packages/scheduler/src packages/scheduler/src/
COPY src src/
RUN npm run build
COPY bin bin/
COPY web web/
COPY LICENSE README.md ./

FROM node:20-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/scheduler/package.json packages/scheduler/
# Production dependencies only; the workspace link node_modules/@sluice/scheduler points at
# packages/scheduler, whose dist/ comes from the build stage.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /src/packages/scheduler/dist packages/scheduler/dist/
COPY --from=build /src/dist dist/
COPY --from=build /src/bin bin/
COPY --from=build /src/web web/
COPY --from=build /src/LICENSE /src/README.md ./
# The working directory is the node user's home: the default DuckDB usage ledger
# (sluice-ledger.duckdb) is written there; mount a volume on it to keep the ledger.
WORKDIR /home/node
USER node
EXPOSE 30000 9180
# The healthcheck asks the gateway's /health; set SLUICE_HEALTH_URL when it listens elsewhere.
ENV SLUICE_HEALTH_URL=http://127.0.0.1:30000/health
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch(process.env.SLUICE_HEALTH_URL).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "/app/bin/sluice.js"]
# The gateway reads its flags from a mounted file (deploy/sluice-replicas.yaml mounts a ConfigMap);
# it needs at least worker_urls, and host: 0.0.0.0 to be reachable from outside the container.
CMD ["--config", "/etc/sluice/gateway.yaml"]
