# shapeviz dashboard. Build: docker build -t shapeviz .   Run: docker run -p 8501:8501 shapeviz
FROM python:3.11-slim

# chromium renders PNG exports server-side (kaleido drives the system browser; nothing is downloaded at run time).
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium fonts-dejavu-core make \
 && rm -rf /var/lib/apt/lists/*

# The same Make targets as on a workstation; the venv lives outside /app so the image's user cannot change it.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 BROWSER_PATH=/usr/bin/chromium PIP_NO_CACHE_DIR=1 VENV=/opt/venv
# Two malloc arenas, not eight per core: fewer places for freed memory to sit, a lower peak under concurrent
# uploads (components/launch.py asks glibc for the same when the variable is unset).
ENV MALLOC_ARENA_MAX=2
# Arrow's buffers from glibc's malloc too, not pyarrow's default mimalloc pool, which kept ~250 MB of freed pages
# after five 200k-row uploads had ended (components/launch.py asks for the same when the variable is unset).
ENV ARROW_DEFAULT_MEMORY_POOL=system
WORKDIR /app
COPY Makefile requirements.txt ./
RUN make deps

COPY app.py ./
COPY components ./components
COPY pages ./pages
COPY shapeviz ./shapeviz
COPY data ./data
COPY .streamlit ./.streamlit

RUN useradd --create-home --uid 10001 shapeviz
USER shapeviz

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD /opt/venv/bin/python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)" || exit 1
# components.launch is `streamlit run app.py` with the pages' imports done before the server listens.
ENTRYPOINT ["/opt/venv/bin/python", "-m", "components.launch", "--server.port=8501", "--server.address=0.0.0.0"]
