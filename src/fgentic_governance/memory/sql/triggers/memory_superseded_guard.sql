-- requires: functions/memory_superseded_guard
DROP TRIGGER IF EXISTS memory_superseded_guard ON fgentic_memory.memory;
CREATE TRIGGER memory_superseded_guard BEFORE UPDATE OF superseded_by ON fgentic_memory.memory
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.memory_superseded_guard();
