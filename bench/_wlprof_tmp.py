import cProfile, os, pstats, shutil, sys, tempfile, time
sys.argv = ["x"]
import pages
from _common import start_engine
folder = tempfile.mkdtemp()
os.environ["DATABASE_URL"] = f"sqlite:///{folder}/db.sqlite3"
engine = start_engine()
try:
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    pages._seed(2000)
    ps = pages._pages()
    which = os.environ.get("PAGE", "worklist (/worklist/, every queue)")
    call = ps[which]
    call()
    ts = []
    for _ in range(5):
        t = time.process_time(); call(); ts.append((time.process_time() - t) * 1000)
    print("cpu ms", sorted(ts))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(5): call()
    pr.disable()
    st = pstats.Stats(pr); st.sort_stats("cumulative").print_stats(45)
    st.sort_stats("tottime").print_stats(25)
finally:
    engine.stop(); shutil.rmtree(folder, ignore_errors=True)
