from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "benchmarks.bench_project.bench_app"
    label = "bench_app"
